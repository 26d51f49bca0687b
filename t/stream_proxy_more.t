#!/usr/bin/perl

# Stream proxy settings real configs use: proxy_bind (the backend sees the
# connection come from 127.0.0.2; with a variable from a map),
# proxy_download_rate and proxy_upload_rate (a transfer paced to the rate,
# as nginx: the first second's worth at once), proxy_buffer_size (a small
# relay buffer still carries everything), proxy_socket_keepalive, set, and
# resolver in a stream server.

use warnings;
use strict;

use Test::More;
use IO::Select;
use IO::Socket::INET;
use Time::HiRes qw/time/;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;

my $t = Test::Sluice->new()->has(qw/stream/)->plan(21);
my $d = $t->testdir();

$t->write_file_expand('sluice.conf', <<'EOF');

%%TEST_GLOBALS%%

events {
}

stream {
    # Accepted, no effect (sluice's log paths have no variables).
    open_log_file_cache max=10 inactive=20s;

    map $server_port $bind_from {
        %%PORT_8092%% 127.0.0.3;
        default       "";
    }

    server {
        listen 127.0.0.1:%%PORT_8090%%;
        proxy_pass 127.0.0.1:%%PORT_8081%%;
        proxy_bind 127.0.0.2;
    }
    server {
        listen 127.0.0.1:%%PORT_8091%%;
        proxy_pass 127.0.0.1:%%PORT_8081%%;
    }
    server {
        listen 127.0.0.1:%%PORT_8092%%;
        proxy_pass 127.0.0.1:%%PORT_8081%%;
        proxy_bind $bind_from;
    }

    server {
        listen 127.0.0.1:%%PORT_8093%%;
        proxy_pass 127.0.0.1:%%PORT_8082%%;
        proxy_download_rate 16k;
    }
    server {
        listen 127.0.0.1:%%PORT_8094%%;
        proxy_pass 127.0.0.1:%%PORT_8082%%;
        proxy_buffer_size 512;
    }
    server {
        listen 127.0.0.1:%%PORT_8095%%;
        proxy_pass 127.0.0.1:%%PORT_8083%%;
        proxy_upload_rate 8k;
        proxy_half_close on;
    }
    server {
        listen 127.0.0.1:%%PORT_8098%%;
        set $greet "hi $remote_addr";
        set $greet "$greet!";
        return "$greet\n";
    }
    server {
        listen 127.0.0.1:%%PORT_8099%%;
        set $target 127.0.0.1:%%PORT_8081%%;
        proxy_pass $target;
    }
    server {
        listen 127.0.0.1:%%PORT_8100%%;
        resolver 127.0.0.1:%%PORT_8053%%;
        resolver_timeout 3s;
        set $target peer.test:%%PORT_8081%%;
        proxy_pass $target;
    }
    server {
        listen 127.0.0.1:%%PORT_8101%%;
        set $target peer.test:%%PORT_8081%%;
        proxy_pass $target;
    }
    server {
        listen 127.0.0.1:%%PORT_8097%%;
        proxy_pass 127.0.0.1:%%PORT_8084%%;
        proxy_socket_keepalive on;
    }
}

EOF

my $size = 65536;

# Port 8081: says where the connection came from. 8082: sends $size bytes.
# 8083: reads to the end and says how much came.
sub daemon {
	my ($port, $what) = @_;
	my $l = IO::Socket::INET->new(LocalAddr => "127.0.0.1:$port", Listen => 16,
		ReuseAddr => 1) or die "listen $port: $!\n";
	open my $f, '>', "$d/ready_$port" or die; close $f;
	while (my $c = $l->accept()) {
		if ($what eq 'peer') {
			$c->syswrite("from " . $c->peerhost() . "\n");
		} elsif ($what eq 'big') {
			my $data = join '', map { sprintf "%07d\n", $_ } 0 .. $size / 8 - 1;
			my $off = 0;
			while ($off < length $data) {
				my $n = $c->syswrite($data, length($data) - $off, $off) or last;
				$off += $n;
			}
		} else {
			my ($got, $buf) = (0, '');
			while (my $n = $c->sysread($buf, 65536)) { $got += $n }
			$c->syswrite("got $got\n");
		}
		close $c;
	}
}

$t->write_file('dns.txt', "peer.test A 127.0.0.1 30\n");
$t->dns(port(8053));

my %daemons = (8081 => 'peer', 8082 => 'big', 8083 => 'count', 8084 => 'count');
for my $n (sort keys %daemons) {
	my $p = port($n);
	Test::Sluice::_release_ports();
	$t->run_daemon(\&daemon, $p, $daemons{$n});
	$t->waitforfile("$d/ready_$p") or die "daemon $p did not start\n";
}
$t->run();

# What $port answers after $data is sent and the sending side shut, read to
# the close (at most $secs).
sub talk {
	my ($port, $data, $secs) = @_;
	my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1:' . port($port), Timeout => 5)
		or return "connect: $!";
	if (defined $data) {
		my $off = 0;
		while ($off < length $data) {
			my $n = $s->syswrite($data, length($data) - $off, $off) or last;
			$off += $n;
		}
		$s->shutdown(1);
	}
	my ($r, $sel, $end) = ('', IO::Select->new($s), time() + ($secs // 5));
	while ($sel->can_read($end - time())) {
		$s->sysread($r, 65536, length $r) or last;
		last if time() >= $end;
	}
	return $r;
}

is(talk(8090), "from 127.0.0.2\n", 'proxy_bind: the upstream connection comes from 127.0.0.2');
is(talk(8091), "from 127.0.0.1\n", 'without proxy_bind: the usual address');
like(talk(8092), qr/^from 127\.0\.0\.3$/m, 'proxy_bind with a variable (a map)');

my $expect = join '', map { sprintf "%07d\n", $_ } 0 .. $size / 8 - 1;

my $start = time();
my $got = talk(8093, undef, 15);
my $took = time() - $start;
is(length $got, $size, 'download rate: everything came');
ok($got eq $expect, 'download rate: in order, intact');
# 64 KiB at 16 KiB/s, the first second's worth at once: 3 s.
cmp_ok($took, '>=', 2.5, 'download rate: 64 KiB at 16k/s took about 3 s or more');

$got = talk(8094, undef, 10);
is(length $got, $size, 'proxy_buffer_size 512: everything came');
ok($got eq $expect, 'proxy_buffer_size 512: intact');

$start = time();
is(talk(8095, 'x' x 24576, 15), "got 24576\n", 'upload rate: everything went');
$took = time() - $start;
# 24 KiB at 8 KiB/s, the first 8 KiB at once: 2 s.
cmp_ok($took, '>=', 1.5, 'upload rate: 24 KiB at 8k/s took about 2 s or more');

# proxy_socket_keepalive: the upstream connection has a keepalive timer
# (ss -o); one without it has none.
my @held = map {
	IO::Socket::INET->new(PeerAddr => '127.0.0.1:' . port($_), Timeout => 5) or die "connect: $!";
} (8097, 8095);
sub timer_to {
	my ($port) = @_;
	for (1 .. 20) {
		my ($line) = grep { /127\.0\.0\.1:$port\b/ }
			split /\n/, `ss -tno state established '( dport = :$port )' 2>/dev/null`;
		return $line if defined $line;
		select undef, undef, undef, 0.1;
	}
	return 'no connection';
}
SKIP: {
	skip 'no ss(8)', 3 unless `ss -V 2>/dev/null` =~ /\d/;
	like(timer_to(port(8084)), qr/timer:\(keepalive/, 'proxy_socket_keepalive on: SO_KEEPALIVE');
	my $plain = timer_to(port(8083));
	like($plain, qr/127\.0\.0\.1:\d+/, 'a connection without it is there');
	unlike($plain, qr/keepalive/, 'without it: no keepalive timer');
}
close $_ for @held;

# set (ngx_stream_set_module): in order, read by return and proxy_pass.
is(talk(8098), "hi 127.0.0.1!\n", 'set: in order, with variables');
is(talk(8099), "from 127.0.0.1\n", 'set: proxy_pass $var reads it');

# resolver at stream server level: that server resolves, the other has none.
is(talk(8100), "from 127.0.0.1\n", 'a server\'s own resolver resolves proxy_pass $var');
is(talk(8101), '', 'a server without one (nor the stream block): closed');
ok($t->waitforlog(qr/\[error\] .*no resolver defined to resolve peer\.test, client: 127\.0\.0\.1/),
	'logged as nginx');

$t->stop();
my $log = $t->read_file('error.log');
unlike($log, qr/\[error\] (?!.*no resolver defined)/, 'no other errors logged');

# A bad proxy_bind value at run time: 500 in nginx's words.
$t->write_file_expand('bad.conf', <<'EOF');
%%TEST_GLOBALS%%
events {}
stream {
    server {
        listen 127.0.0.1:%%PORT_8096%%;
        proxy_pass 127.0.0.1:%%PORT_8081%%;
        proxy_bind 127.0.0.1 transparent;
    }
}
EOF
my ($rc, undef, $err) = $t->run_binary("-p", "$d/", "-t", "-c", "$d/bad.conf");
isnt($rc, 0, 'proxy_bind ... transparent is refused');
like($err, qr/"proxy_bind \.\.\. transparent" is not supported .* in \S+bad\.conf:\d+/,
	'with file:line');
