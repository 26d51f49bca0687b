#!/usr/bin/perl

# Stream UDP (`listen ... udp`): sessions per client address:port, a peer per
# session by the balancer, datagrams relayed whole both ways, ended by
# proxy_responses, proxy_requests or proxy_timeout (the access log line then),
# a refusing peer (ICMP port unreachable) failed over to the next, health
# check verdicts, a TCP listener on the same port number, and a reload.

use warnings;
use strict;

use Test::More;
use IO::Socket::INET;
use IO::Select;
use Time::HiRes qw/sleep/;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;

my $t = Test::Sluice->new()->has(qw/stream/)->plan(27);
my $d = $t->testdir();

$t->write_file_expand('sluice.conf', <<'EOF');

%%TEST_GLOBALS%%

events {
}

stream {
    log_format u '$server_port $protocol $status $bytes_sent $bytes_received [$upstream_addr] $session_time';
    access_log %%TESTDIR%%/udp.log u;

    upstream two {
        server 127.0.0.1:%%PORT_8081_UDP%%;
        server 127.0.0.1:%%PORT_8082_UDP%%;
    }
    upstream one {
        server 127.0.0.1:%%PORT_8081_UDP%%;
    }
    upstream dead_first {
        server 127.0.0.1:%%PORT_8089_UDP%%;
        server 127.0.0.1:%%PORT_8081_UDP%%;
    }
    upstream dead_only {
        server 127.0.0.1:%%PORT_8089_UDP%%;
    }
    upstream checked {
        zone checked 64k;
        server 127.0.0.1:%%PORT_8088_UDP%% max_fails=0;
        server 127.0.0.1:%%PORT_8082_UDP%% max_fails=0;
    }

    # DNS-like: one answer per question ends the session.
    server {
        listen 127.0.0.1:%%PORT_8070_UDP%% udp;
        proxy_pass two;
        proxy_responses 1;
    }
    # The same port number over TCP is another listener.
    server {
        listen 127.0.0.1:%%PORT_8070_UDP%%;
        return "tcp $protocol\n";
    }
    server {
        listen 127.0.0.1:%%PORT_8071_UDP%% udp;
        proxy_pass one;
        proxy_requests 2;
        proxy_responses 1;
    }
    # No count: only the timeout ends it, well.
    server {
        listen 127.0.0.1:%%PORT_8072_UDP%% udp;
        proxy_pass one;
        proxy_timeout 1s;
    }
    # Two answers expected, one comes: the timeout ends it with 502.
    server {
        listen 127.0.0.1:%%PORT_8073_UDP%% udp;
        proxy_pass one;
        proxy_responses 2;
        proxy_timeout 1s;
    }
    server {
        listen 127.0.0.1:%%PORT_8074_UDP%% udp;
        proxy_pass dead_first;
        proxy_responses 1;
    }
    server {
        listen 127.0.0.1:%%PORT_8075_UDP%% udp;
        proxy_pass dead_only;
        proxy_responses 1;
        proxy_next_upstream off;
    }
    server {
        listen 127.0.0.1:%%PORT_8076_UDP%% udp;
        proxy_pass checked;
        proxy_responses 1;
        health_check udp interval=200ms;
    }
}


EOF

# A UDP echo: each datagram back as "NAME:" and the datagram.
sub echo {
	my ($port, $name) = @_;
	my $s = IO::Socket::INET->new(LocalAddr => "127.0.0.1:$port", Proto => 'udp')
		or die "udp $port: $!";
	open my $r, '>', "$d/ready_$port"; close $r;
	local $SIG{TERM} = sub { exit 0 };
	while (defined $s->recv(my $b, 65536)) {
		$s->send("$name:$b");
	}
}

Test::Sluice::_release_ports();
my ($b1, $b2) = (port(8081, udp => 1), port(8082, udp => 1));
$t->run_daemon(\&echo, $b1, 'b1');
$t->run_daemon(\&echo, $b2, 'b2');
$t->waitforfile("$d/ready_$_") or die "udp echo $_" for $b1, $b2;
$t->run();

sub client {
	my ($port) = @_;
	my $c = IO::Socket::INET->new(PeerAddr => "127.0.0.1:$port", Proto => 'udp')
		or die "client: $!";
	return $c;
}

# The next datagram on $s within $secs, or undef.
sub answer {
	my ($s, $secs) = @_;
	return undef unless IO::Select->new($s)->can_read($secs // 3);
	my $b;
	return defined $s->recv($b, 65536) ? $b : undef;
}

sub ask {
	my ($port, $what, $secs) = @_;
	my $s = client($port);
	$s->send($what);
	return answer($s, $secs);
}

# The access log lines of a listener's port.
sub lines {
	my ($port) = @_;
	return grep { /^$port / } split /\n/, $t->read_file('udp.log');
}

my $p = port(8070, udp => 1);

# DNS-like request/response, round robin by sessions.
my @got = map { ask($p, "q$_") } 1 .. 4;
like($got[0], qr/^b[12]:q1$/, 'a datagram through, answered');
my %by = map { (split /:/)[0] => 1 } grep { defined } @got;
is(join(',', sort keys %by), 'b1,b2', 'sessions balanced round robin');
isnt(substr($got[0] // '', 0, 2), substr($got[1] // '', 0, 2), 'the next session, the next peer');
ok(poll_until(sub { lines($p) >= 4 }, 5), 'each session logged at its answer');
like((lines($p))[0] // '', qr/^$p UDP 200 5 2 \[127\.0\.0\.1:\d+\] \d+\.\d{3}$/,
	'access log: protocol, status, bytes sent and received, upstream');

# Datagram boundaries and size.
my $big = 'x' x 60000;
is(length(ask($p, $big) // ''), 60003, 'a 60000-byte datagram whole');

my @empty = map { ask($p, '') } 1 .. 2;
ok((grep { ($_ // '') =~ /^b[12]:$/ } @empty) == 2, 'an empty datagram is relayed too');

# TCP on the same port number.
my $tcp = IO::Socket::INET->new(PeerAddr => "127.0.0.1:$p", Proto => 'tcp');
my $line = $tcp ? <$tcp> : '';
is($line, "tcp TCP\n", 'TCP on the same port is its own listener');

# proxy_requests 2: two datagrams are one session, the third starts another.
my $r = port(8071, udp => 1);
my $s = client($r);
$s->send('aa');
is(answer($s), 'b1:aa', 'first of the session');
$s->send('bbb');
is(answer($s), 'b1:bbb', 'second of the session');
ok(poll_until(sub { lines($r) >= 1 }, 5), 'session done after proxy_requests and answers');
like((lines($r))[0] // '', qr/^$r UDP 200 11 5 /, 'both datagrams counted in one session');
$s->send('c');
is(answer($s), 'b1:c', 'the next datagram starts a new session');
sleep 0.3;
is(scalar(lines($r)), 1, 'which waits for its second datagram');

# proxy_timeout ends an idle session.
my $to = port(8072, udp => 1);
is(ask($to, 'idle'), 'b1:idle', 'answered');
ok(poll_until(sub { lines($to) >= 1 }, 5), 'the idle session ended');
like((lines($to))[0] // '', qr/^$to UDP 200 7 4 \[127\.0\.0\.1:$b1\] [1-9]\.\d{3}$/,
	'after proxy_timeout, status 200');
ok($t->waitforlog(qr/udp timed out, packets from\/to client:1\/1/), 'udp timed out, info');

my $short = port(8073, udp => 1);
is(ask($short, 'x'), 'b1:x', 'one answer of two');
ok(poll_until(sub { lines($short) >= 1 }, 5) && (lines($short))[0] =~ /^$short UDP 502 /,
	'an answer missing at the timeout: 502');

# A refusing peer: the first datagram goes to the next one.
my $dead = port(8089, udp => 1);
my $nx = port(8074, udp => 1);
is(ask($nx, 'hello'), 'b1:hello', 'refused peer, next one answered');
ok(poll_until(sub { lines($nx) >= 1 }, 5)
	&& (lines($nx))[0] =~ /\[127\.0\.0\.1:$dead, 127\.0\.0\.1:$b1\]/,
	'both attempts in $upstream_addr');
like($t->read_file('error.log'),
	qr/(?:recv|send)\(\) failed \(111: Connection refused\) while proxying and (?:reading from|sending to) upstream, udp client: 127\.0\.0\.1/,
	'the refusal logged as nginx');
my $off = port(8075, udp => 1);
is(ask($off, 'hello', 1), undef, 'proxy_next_upstream off: no answer');
ok(poll_until(sub { lines($off) >= 1 }, 5) && (lines($off))[0] =~ /^$off UDP 502 .*\[127\.0\.0\.1:$dead\]/,
	'and 502');

# Health checks: the unhealthy peer is not picked.
sleep 1;
my $hc = port(8076, udp => 1);
my @hc = map { ask($hc, "h$_") // '' } 1 .. 4;
is(join(',', @hc), 'b2:h1,b2:h2,b2:h3,b2:h4', 'health check verdicts used');

# A reload keeps UDP served.
$t->reload();
sleep 0.5;
like(ask($p, 'after') // '', qr/^b[12]:after$/, 'served after a reload');

$t->stop();
$t->stop_daemons();
