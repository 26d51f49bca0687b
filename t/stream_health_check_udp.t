#!/usr/bin/perl

# Stream health_check udp: a datagram to each peer on loopback. Without a
# match a peer passes unless an ICMP port unreachable comes back (a closed
# port is unhealthy, a UDP echo is up); with a match, its send goes out and
# the first datagram back must meet its expect.

use warnings;
use strict;

use Test::More;
use IO::Socket::INET;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;

my $t = Test::Sluice->new()->has(qw/stream http/)->plan(7);
my $d = $t->testdir();

$t->write_file_expand('sluice.conf', <<'EOF');

%%TEST_GLOBALS%%

events {
}

stream {
    health_check_timeout 300ms;

    match pong {
        send "PING";
        expect "PONG";
    }
    match nope {
        send "PING";
        expect ~ "^NO";
    }

    upstream plain {
        zone plain 64k;
        server 127.0.0.1:%%PORT_8081%% max_fails=0;
        server 127.0.0.1:%%PORT_8082%% max_fails=0;
    }
    upstream pong {
        zone pong 64k;
        server 127.0.0.1:%%PORT_8081%% max_fails=0;
    }
    upstream nope {
        zone nope 64k;
        server 127.0.0.1:%%PORT_8081%% max_fails=0;
    }

    server {
        listen 127.0.0.1:%%PORT_8071%%;
        proxy_pass plain;
        health_check udp interval=200ms;
    }
    server {
        listen 127.0.0.1:%%PORT_8072%%;
        proxy_pass pong;
        health_check udp interval=200ms match=pong;
    }
    server {
        listen 127.0.0.1:%%PORT_8073%%;
        proxy_pass nope;
        health_check udp interval=200ms match=nope;
    }
}

http {
    access_log off;
    server {
        listen 127.0.0.1:%%PORT_8080%%;
        location /api/ { api; }
    }
}

EOF

# A UDP echo: "PING" gets "PONG", anything else "HUH"; each datagram is
# logged to udp.log.
sub echo {
	my ($port) = @_;
	my $s = IO::Socket::INET->new(LocalAddr => "127.0.0.1:$port", Proto => 'udp')
		or die "udp $port: $!";
	open my $r, '>', "$d/ready_$port"; close $r;
	local $SIG{TERM} = sub { exit 0 };
	while (defined $s->recv(my $b, 65536)) {
		open my $log, '>>', "$d/udp.log"; print $log "$b\n"; close $log;
		$s->send($b eq 'PING' ? 'PONG' : 'HUH');
	}
}

Test::Sluice::_release_ports();
$t->run_daemon(\&echo, port(8081));
$t->waitforfile("$d/ready_" . port(8081)) or die "udp echo";
$t->run();

my ($p1, $p2) = (port(8081), port(8082));

# The API's peer object for stream upstream $u at port $p.
sub api_peer { upstream_peer(@_, undef, 'stream') }

sub up_after_checks {
	my ($u, $p) = @_;
	return poll_until(sub { my $j = api_peer($u, $p);
		$j->{state} eq 'up' && $j->{health_checks}{checks} >= 2 && $j->{health_checks}{fails} == 0 }, 6);
}

ok(up_after_checks('plain', $p1), 'no match: a UDP echo passes');
ok(poll_until(sub { api_peer('plain', $p2)->{state} eq 'unhealthy' }, 6),
	'no match: a closed port (ICMP port unreachable) fails');
like($t->read_file('error.log'),
	qr/\[warn\] .*peer is unhealthy while reading data from upstream, health check "" of peer 127\.0\.0\.1:$p2 in upstream "plain"/,
	'logged');
like($t->read_file('udp.log'), qr/^nginx health check$/m, 'the probe without a match');
ok(up_after_checks('pong', $p1), 'match: send and expect pass');
like($t->read_file('udp.log'), qr/^PING$/m, 'the match\'s send');
ok(poll_until(sub { api_peer('nope', $p1)->{state} eq 'unhealthy' }, 6),
	'match: a reply that does not meet expect fails');
