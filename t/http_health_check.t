#!/usr/bin/perl

# Active health checks (health_check, match) through the real binary with
# two workers: only one worker checks (the backends count the checks), its
# verdict is shared (an unhealthy peer gets no traffic from any worker and
# comes back after passes=), match conditions on status, header and body,
# mandatory keeps a new peer out until it passes, the API shows the Plus
# shape, and another worker takes over when the checker's worker dies.

use warnings;
use strict;

use Test::More;
use IO::Socket::INET;
use Time::HiRes qw/time/;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;

my $t = Test::Sluice->new()->has(qw/http upstream_zone/)->plan(19);

$t->write_file_expand('sluice.conf', <<'EOF');

%%TEST_GLOBALS%%

worker_processes 2;

events {
}

http {
    access_log off;

    match good {
        status 200-399;
        header Content-Type ~ text/html;
        header X-A = b;
        body ~ "ok";
    }

    upstream u {
        zone z 64k;
        server 127.0.0.1:%%PORT_8081%% max_fails=0;
        server 127.0.0.1:%%PORT_8082%% max_fails=0;
    }

    upstream m {
        zone z2 64k;
        server 127.0.0.1:%%PORT_8083%% max_fails=0;
        server 127.0.0.1:%%PORT_8084%% max_fails=0;
    }

    server {
        listen 127.0.0.1:%%PORT_8080%%;
        location / {
            proxy_pass http://u;
            health_check interval=200ms fails=2 passes=2 uri=/health;
        }
        location /m/ {
            proxy_pass http://m;
            health_check interval=200ms uri=/health match=good mandatory;
        }
        location /api/ { api; }
    }
}

EOF

my $d = $t->testdir();

# A backend answering one request per connection: /health with the status,
# headers and body the files hc_PORT holds ("STATUS [HEADER-LINE] [BODY]"
# fields separated by '|'; default 200), anything else 200 "PORT". Each
# request's URI is appended to req_PORT.log.
sub backend {
	my ($port) = @_;
	my $l = IO::Socket::INET->new(LocalAddr => "127.0.0.1:$port",
		Listen => 128, ReuseAddr => 1, Proto => 'tcp') or die "$port: $!";
	open my $r, '>', "$d/ready_$port"; close $r;
	local $SIG{TERM} = sub { exit 0 };
	while (my $c = $l->accept()) {
		my $head = '';
		while ($head !~ /\r\n\r\n/) {
			my $n = sysread($c, my $b, 4096) or last;
			$head .= $b;
		}
		my ($uri) = $head =~ /^\S+ (\S+)/;
		$uri //= '-';
		open my $log, '>>', "$d/req_$port.log"; print $log "$uri\n"; close $log;
		my ($status, $hdr, $body) = (200, "X-A: b", "ok $port");
		if ($uri eq '/health' && open my $f, '<', "$d/hc_$port") {
			my $line = <$f> // ''; chomp $line;
			my @f = split /\|/, $line, -1;
			$status = $f[0] if length($f[0] // '');
			$hdr = $f[1] if defined $f[1];
			$body = $f[2] if defined $f[2];
		}
		print $c "HTTP/1.1 $status X\r\nContent-Type: text/html\r\n"
			. ($hdr ne '' ? "$hdr\r\n" : '')
			. "X-Port: $port\r\nContent-Length: " . length($body)
			. "\r\nConnection: close\r\n\r\n$body";
		close $c;
	}
}

Test::Sluice::_release_ports();
for my $p (8081, 8082, 8083, 8084) {
	$t->run_daemon(\&backend, port($p));
	$t->waitforfile("$d/ready_" . port($p)) or die "backend $p";
}

# 8084 fails the match (no X-A header) from the start: mandatory keeps it out.
$t->write_file('hc_' . port(8084), "200||ok");
$t->run();

my ($p1, $p2, $p3, $p4) = map { port($_) } (8081, 8082, 8083, 8084);

sub checks {
	my ($port) = @_;
	open my $f, '<', "$d/req_$port.log" or return 0;
	return scalar grep { $_ eq "/health\n" } <$f>;
}

sub many {
	my ($uri, $n) = @_;
	my %c;
	for (1 .. $n) {
		my $r = http_get($uri);
		my ($p) = $r =~ /^X-Port: (\d+)/mi;
		$c{$p // 'none'}++;
	}
	return \%c;
}

# Mandatory: no traffic before the first check passes; 8084 never passes.
ok(poll_until(sub { upstream_peer('m', $p3)->{state} eq 'up' }, 5), 'mandatory peer up once passed');
my $c = many('/m/x', 10);
is($c->{$p3}, 10, 'mandatory: a peer that never passed gets no traffic');

# Two workers, interval 200ms: about 5 checks a second per peer, not 10.
poll_until(sub { checks($p1) >= 1 }, 5);
my ($n0, $t0) = (checks($p1), time());
select(undef, undef, undef, 2);
my $rate = (checks($p1) - $n0) / (time() - $t0);
ok($rate > 2.5 && $rate < 7.5, "one worker checks (about 5/s, got $rate/s)");
my @who = $t->read_file('error.log')
	=~ /\] (\d+)#\d+: health checks of upstream "u" in zone "z" run in this worker/g;
is(scalar @who, 1, 'one worker holds the health-check lease');

$c = many('/', 10);
is("$c->{$p1}/$c->{$p2}", '5/5', 'both healthy peers used');

# 8081 answers its checks with 500: unhealthy after fails=2, no traffic.
$t->write_file('hc_' . $p1, "500");
ok(poll_until(sub { upstream_peer('u', $p1)->{state} eq 'unhealthy' }, 5), 'unhealthy after fails=2');
$c = many('/', 10);
is($c->{$p2}, 10, 'unhealthy peer gets no traffic (both workers)');
my $pj = upstream_peer('u', $p1);
ok($pj->{health_checks}{fails} >= 2 && $pj->{health_checks}{unhealthy} == 1
	&& !$pj->{health_checks}{last_passed}, 'API health_checks counters');
like($t->read_file('error.log'), qr/\[warn\] .*peer is unhealthy while checking response of upstream, health check "\/health" of peer 127\.0\.0\.1:$p1 in upstream "u"/, 'unhealthy logged');

# Back after passes=2.
$t->write_file('hc_' . $p1, "200");
ok(poll_until(sub { upstream_peer('u', $p1)->{state} eq 'up' }, 5), 'healthy again after passes');
$c = many('/', 10);
is("$c->{$p1}/$c->{$p2}", '5/5', 'recovered peer used again');
ok(upstream_peer('u', $p1)->{downtime} >= 200, 'downtime counted');

# match: the body, the header, the status each matter.
is(upstream_peer('m', $p4)->{state}, 'unhealthy', 'match: missing header fails');
$t->write_file('hc_' . $p4, "200|X-A: b|ok");
ok(poll_until(sub { upstream_peer('m', $p4)->{state} eq 'up' }, 5), 'match: all conditions pass');
$c = many('/m/x', 10);
is("$c->{$p3}/$c->{$p4}", '5/5', 'passed mandatory peer gets traffic');
$t->write_file('hc_' . $p4, "200|X-A: b|bad");
ok(poll_until(sub { upstream_peer('m', $p4)->{state} eq 'unhealthy' }, 5), 'match: body fails');
$t->write_file('hc_' . $p4, "404|X-A: b|ok");
ok(poll_until(sub { upstream_peer('m', $p4)->{health_checks}{last_passed} == 0
	&& upstream_peer('m', $p4)->{state} eq 'unhealthy' }, 5), 'match: status fails');

# The checker's worker dies: another takes over within about 2 s.
my $victim = $who[0];
kill 'KILL', $victim;
my $start = time();
ok(poll_until(sub {
	my @w = $t->read_file('error.log')
		=~ /\] (\d+)#\d+: health checks of upstream "u" in zone "z" run in this worker/g;
	@w > 1 && $w[-1] != $victim }, 5), 'another worker takes the checks');
my $n1 = checks($p1);
ok(poll_until(sub { checks($p1) > $n1 + 2 }, 3) && time() - $start < 3.5,
	'checks go on within ~2 s');
$t->expect_errors(qr/worker process \d+ exited on signal 9/);
