#!/usr/bin/perl

# Stream active health checks through the real binary: a TCP connect check
# (a peer that refuses is unhealthy and gets no sessions, and comes back
# when it listens), and a match with send/expect (a peer whose reply does
# not match gets no sessions).

use warnings;
use strict;

use Test::More;
use IO::Socket::INET;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;

my $t = Test::Sluice->new()->has(qw/stream http/)->plan(6);

$t->write_file_expand('sluice.conf', <<'EOF');

%%TEST_GLOBALS%%

worker_processes 2;

events {
}

stream {
    match pong {
        send "PING\r\n";
        expect ~ "PO+NG";
    }

    upstream tcp {
        zone z 64k;
        server 127.0.0.1:%%PORT_8081%% max_fails=0;
        server 127.0.0.1:%%PORT_8082%% max_fails=0;
    }

    upstream ex {
        zone z2 64k;
        server 127.0.0.1:%%PORT_8083%% max_fails=0;
        server 127.0.0.1:%%PORT_8084%% max_fails=0;
    }

    server {
        listen 127.0.0.1:%%PORT_8070%%;
        proxy_pass tcp;
        health_check interval=200ms fails=1 passes=1;
    }
    server {
        listen 127.0.0.1:%%PORT_8071%%;
        proxy_pass ex;
        health_check interval=200ms match=pong;
        health_check_timeout 1s;
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

my $d = $t->testdir();

# A TCP backend: reads a line; "PING" gets the reply the backend was
# started with, anything else its port.
sub backend {
	my ($port, $reply) = @_;
	my $l = IO::Socket::INET->new(LocalAddr => "127.0.0.1:$port",
		Listen => 128, ReuseAddr => 1, Proto => 'tcp') or die "$port: $!";
	open my $r, '>', "$d/ready_$port"; close $r;
	local $SIG{TERM} = sub { exit 0 };
	while (my $c = $l->accept()) {
		my $line = '';
		while ($line !~ /\n/) {
			my $n = sysread($c, my $b, 4096) or last;
			$line .= $b;
		}
		print $c ($line =~ /^PING/ ? $reply : "$port\n");
		close $c;
	}
}

sub start {
	my ($p, $reply) = @_;
	Test::Sluice::_release_ports();
	$t->run_daemon(\&backend, port($p), $reply);
	$t->waitforfile("$d/ready_" . port($p)) or die "backend $p";
}

start(8081, "PONG\r\n");
start(8083, "POOONG\r\n");
start(8084, "NOPE\r\n");
$t->run();

my ($p1, $p2, $p3, $p4) = map { port($_) } (8081, 8082, 8083, 8084);

sub session {
	my ($port) = @_;
	my $s = IO::Socket::INET->new(PeerAddr => "127.0.0.1:$port", Proto => 'tcp',
		Timeout => 3) or return 'none';
	print $s "hello\n";
	my $r = '';
	while (sysread($s, my $b, 4096)) { $r .= $b; }
	return $r =~ /^(\d+)/ ? $1 : 'none';
}

sub many {
	my ($port, $n) = @_;
	my %c;
	$c{session($port)}++ for 1 .. $n;
	return \%c;
}

ok(poll_until(sub { state('tcp', $p2) eq 'unhealthy' }, 5), 'refusing peer unhealthy');
my $c = many(port(8070), 6);
is($c->{$p1}, 6, 'sessions only to the healthy peer');

start(8082, "PONG\r\n");
ok(poll_until(sub { state('tcp', $p2) eq 'up' }, 5), 'listening again: healthy');
$c = many(port(8070), 6);
is("$c->{$p1}/$c->{$p2}", '3/3', 'both peers used');

ok(poll_until(sub { state('ex', $p4) eq 'unhealthy' && state('ex', $p3) eq 'up' }, 5),
	'send/expect: the wrong reply is unhealthy');
$c = many(port(8071), 6);
is($c->{$p3}, 6, 'sessions only to the matching peer');

sub state {
	my ($u, $p) = @_;
	my $r = http_get("/api/9/stream/upstreams/$u");
	my ($body) = $r =~ /\r\n\r\n(.*)$/s;
	require JSON::PP;
	my $j = eval { JSON::PP->new->decode($body // '') } or return '';
	for my $peer (@{$j->{peers}}) {
		return $peer->{state} if $peer->{server} eq "127.0.0.1:$p";
	}
	return '';
}
