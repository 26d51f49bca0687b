#!/usr/bin/perl

# Active health checks under load: three backends behind two upstreams that
# name the same addresses, one with health_check (interval=200ms fails=1
# passes=1, its checks on uri=/hc-probe so the backends tell them from real
# requests, match=alive on status and body) and one without; both with
# max_fails=0 (no passive verdict) and proxy_next_upstream error timeout
# http_500. Six keep-alive clients (three on each upstream) send requests
# while one backend turns bad in each way -- 500 to everything (the check
# URI too), a check body that fails the match, accept and hang, refuse --
# and comes back. No client request fails; the checked upstream stops
# sending real requests to the bad backend within a bound after it turned
# bad (two intervals, plus the read timeout when it hangs, plus slack for a
# loaded machine) while the unchecked one keeps sending them; the API shows
# the peer unhealthy in that bound, and up again with traffic after it is
# back.

use warnings;
use strict;

use Test::More;
use IO::Socket::INET;
use IO::Select;
use POSIX ();
use Time::HiRes qw/time sleep/;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;

my $t = Test::Sluice->new()->has(qw/http upstream_zone/)->plan(29);

$t->write_file_expand('sluice.conf', <<'EOF');

%%TEST_GLOBALS%%

worker_processes 2;

events {
}

http {
    access_log off;
    proxy_next_upstream error timeout http_500;
    proxy_connect_timeout 1s;
    proxy_read_timeout 500ms;

    match alive {
        status 200;
        body ~ "^ok$";
    }

    upstream hc {
        zone z 64k;
        server 127.0.0.1:%%PORT_8081%% max_fails=0;
        server 127.0.0.1:%%PORT_8082%% max_fails=0;
        server 127.0.0.1:%%PORT_8083%% max_fails=0;
    }

    upstream plain {
        zone z2 64k;
        server 127.0.0.1:%%PORT_8081%% max_fails=0;
        server 127.0.0.1:%%PORT_8082%% max_fails=0;
        server 127.0.0.1:%%PORT_8083%% max_fails=0;
    }

    server {
        listen 127.0.0.1:%%PORT_8080%%;
        location /hc/ {
            proxy_pass http://hc;
            health_check interval=200ms fails=1 passes=1 uri=/hc-probe match=alive;
        }
        location /plain/ {
            proxy_pass http://plain;
        }
        location /api/ { api; }
    }
}

EOF

my $d = $t->testdir();
my $interval = 0.2;
my $read_timeout = 0.5;

# A backend in the mode the file mode_PORT holds: ok (200 "ok"), 500 (to
# every request), badbody (200 "no" to the checks, which fails their match),
# hang (accepts, reads the request, never answers) or refuse (its listening
# socket closed). Each request is logged to req_PORT.log as
# "TIME URI" when its head is read; a mode change as "TIME MODE mode".
sub backend {
	my ($port) = @_;
	my $listen = sub {
		IO::Socket::INET->new(LocalAddr => "127.0.0.1:$port",
			Listen => 128, ReuseAddr => 1, Proto => 'tcp');
	};
	my $l = $listen->() or die "$port: $!";
	open my $r, '>', "$d/ready_$port"; close $r;
	local $SIG{TERM} = sub { POSIX::_exit(0) };
	local $SIG{PIPE} = 'IGNORE';
	my ($mode, @held) = ('ok');
	my $log = sub {
		open my $f, '>>', "$d/req_$port.log" or return;
		printf $f "%.4f %s\n", time(), $_[0];
		close $f;
	};
	while (1) {
		my $m = 'ok';
		if (open my $f, '<', "$d/mode_$port") {
			$m = <$f> // 'ok';
			chomp $m;
		}
		if ($m ne $mode) {
			$mode = $m;
			@held = ();
			if ($mode eq 'refuse') {
				close $l if $l;
				undef $l;
			} elsif (!$l) {
				$l = $listen->() or die "$port: $!";
			}
			$log->("MODE $mode");
		}
		unless ($l) {
			sleep 0.01;
			next;
		}
		next unless IO::Select->new($l)->can_read(0.01);
		my $c = $l->accept() or next;
		my ($head, $sel) = ('', IO::Select->new($c));
		while ($head !~ /\r\n\r\n/ && $sel->can_read(1)) {
			sysread($c, $head, 4096, length $head) or last;
		}
		my ($uri) = $head =~ /^\S+ (\S+)/;
		$log->($uri // '-');
		if ($mode eq 'hang') {
			push @held, $c;
			next;
		}
		my $status = $mode eq '500' ? 500 : 200;
		my $body = $mode eq 'badbody' && ($uri // '') eq '/hc-probe' ? 'no' : 'ok';
		syswrite($c, "HTTP/1.1 $status X\r\nX-Port: $port\r\n"
			. "Content-Length: 2\r\nConnection: close\r\n\r\n$body");
		close $c;
	}
}

# A client: sequential GETs of PREFIX/N on one keep-alive connection (a new
# one after an error) until END; writes "OK FAILED" to FILE.
sub client {
	my ($prefix, $end, $file) = @_;
	my ($ok, $failed, $s, $n) = (0, 0, undef, 0);
	local $SIG{PIPE} = 'IGNORE';
	while (time() < $end) {
		$s //= IO::Socket::INET->new(PeerAddr => '127.0.0.1:' . port(8080),
			Proto => 'tcp', Timeout => 5);
		unless ($s) {
			$failed++;
			sleep 0.05;
			next;
		}
		$n++;
		my $r = keepalive_get($s, "$prefix/$n");
		if ($r =~ m{^HTTP/1\.1 200 } && $r =~ /\r\n\r\nok$/) {
			$ok++;
			# keepalive_requests reached: the next request on a new one.
			undef $s if $r =~ /^Connection: close\r$/mi;
		} else {
			$failed++;
			undef $s;
		}
	}
	open my $f, '>', $file or die "$file: $!";
	print $f "$ok $failed\n";
	close $f;
}

Test::Sluice::_release_ports();
my @ports = map { port($_) } (8081, 8082, 8083);
for my $p (@ports) {
	$t->run_daemon(\&backend, $p);
	$t->waitforfile("$d/ready_$p") or die "backend $p";
}
$t->run();

my $bad = $ports[0];

ok(poll_until(sub { join(',', map { state($_) } @ports) eq 'up,up,up' }, 5),
	'all peers up');

for my $mode (qw/500 badbody hang refuse/) {
	# Clients for 1 s all good, 2 s bad (3 s hanging: fewer requests reach
	# a backend that holds each for the read timeout), 1.5 s back.
	my $bad_for = $mode eq 'hang' ? 3 : 2;
	my $end = time() + 2.5 + $bad_for;
	my @kids;
	for my $i (0 .. 5) {
		my $prefix = $i < 3 ? '/hc' : '/plain';
		my $pid = fork() // die "fork: $!";
		if ($pid == 0) {
			client($prefix, $end, "$d/client_${mode}_$i");
			POSIX::_exit(0);
		}
		push @kids, $pid;
	}
	sleep 1;
	my $bad_at = set_mode($bad, $mode);
	my $seen = poll_state($bad, 'unhealthy', 1.9);
	my $bound = 2 * $interval + ($mode eq 'hang' ? $read_timeout : 0) + 0.3;
	ok($bad_at && $seen && $seen - $bad_at < $bound,
		"$mode: unhealthy in the API within ${bound}s ("
		. ($seen && $bad_at ? sprintf('%.2fs', $seen - $bad_at) : 'not seen') . ')');
	sleep(($bad_at // time()) + $bad_for - time());
	my $good_at = set_mode($bad, 'ok');
	waitpid($_, 0) for @kids;

	my ($ok, $failed) = (0, 0);
	for my $i (0 .. 5) {
		my ($o, $f) = split ' ', ($t->read_file("client_${mode}_$i") // '0 1');
		$ok += $o;
		$failed += $f;
	}
	ok($ok > 100 && $failed == 0, "$mode: all client requests 200 ($ok ok, $failed failed)");

	ok(poll_until(sub { state($bad) eq 'up' }, 3), "$mode: up again after passes");
	my @after = requests($bad, '/hc/', $good_at // time(), time());
	ok(@after > 0, "$mode: the checked upstream sends to it again (" . @after . ')');

	next if $mode eq 'refuse';

	# What reached the bad backend while it was bad.
	my $from = $bad_at // 0;
	my $to = $good_at // time();
	my @hc = requests($bad, '/hc/', $from, $to);
	my @plain = requests($bad, '/plain/', $from, $to);
	my @probe = requests($bad, '/hc-probe', $from, $to);
	ok(@probe >= 1, "$mode: checks reached the bad backend (" . @probe . ')');
	ok(@hc < @plain, "$mode: fewer real requests with checks (" . @hc
		. ') than without (' . @plain . ')');
	my @late = grep { $_ > $from + $bound } @hc;
	is(scalar @late, 0, "$mode: none with checks later than ${bound}s after it turned bad"
		. (@hc ? sprintf(' (last %.2fs)', $hc[-1] - $from) : ''));
	ok((grep { $_ > $from + $bound } @plain) > 0,
		"$mode: still reached without checks after that");
}

# Puts the backend on $port in $mode; the time it logged the switch (waits
# for it), or undef.
sub set_mode {
	my ($port, $mode) = @_;
	my $since = time();
	$t->write_file("mode_$port", $mode);
	my $at;
	poll_until(sub {
		my $log = $t->read_file("req_$port.log") // '';
		($at) = grep { $_ >= $since } $log =~ /^(\S+) MODE \Q$mode\E$/mg;
		defined $at;
	}, 2);
	return $at;
}

# The times of the requests for URIs under $prefix logged by the backend on
# $port between $from and $to.
sub requests {
	my ($port, $prefix, $from, $to) = @_;
	my @r;
	for (split /\n/, $t->read_file("req_$port.log") // '') {
		my ($at, $uri) = split ' ', $_, 2;
		next if $uri =~ /^MODE /;
		next unless index($uri, $prefix) == 0;
		push @r, $at if $at >= $from && $at <= $to;
	}
	return @r;
}

# Polls the API every 20 ms for up to $secs until the peer at $port is in
# $want; the time it was seen, or undef.
sub poll_state {
	my ($port, $want, $secs) = @_;
	my $end = time() + $secs;
	while (time() < $end) {
		return time() if state($port) eq $want;
		sleep 0.02;
	}
	return undef;
}

# The peer's state in upstream hc, from the API.
sub state {
	my ($p) = @_;
	my $r = http_get('/api/9/http/upstreams/hc') // '';
	my ($body) = $r =~ /\r\n\r\n(.*)$/s;
	require JSON::PP;
	my $j = eval { JSON::PP->new->decode($body // '') } or return '';
	for my $peer (@{$j->{peers}}) {
		return $peer->{state} if $peer->{server} eq "127.0.0.1:$p";
	}
	return '';
}
