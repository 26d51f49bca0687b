#!/usr/bin/perl

# Stream UDP with worker_processes 2: with `reuseport` each worker has its
# own socket and the kernel hashes the client's address:port, so all of a
# session's datagrams reach one worker (one session, one access log line);
# without it both workers read the one socket. Binary upgrade (USR2) hands
# the UDP sockets over. Config errors name file:line.

use warnings;
use strict;

use Test::More;
use IO::Socket::INET;
use IO::Select;
use Time::HiRes qw/sleep/;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;

my $t = Test::Sluice->new()->has(qw/stream/)->plan(13);
my $d = $t->testdir();

$t->write_file_expand('sluice.conf', <<'EOF');

%%TEST_GLOBALS%%

worker_processes 2;

events {
}

stream {
    log_format u '$server_port $pid $status $bytes_received';
    access_log %%TESTDIR%%/udp.log u;
    proxy_requests 5;
    proxy_responses 1;

    server {
        listen 127.0.0.1:%%PORT_8070_UDP%% udp reuseport;
        proxy_pass 127.0.0.1:%%PORT_8081_UDP%%;
    }
    server {
        listen 127.0.0.1:%%PORT_8071_UDP%% udp;
        proxy_pass 127.0.0.1:%%PORT_8081_UDP%%;
        proxy_timeout 1s;
    }
}

EOF

sub echo {
	my ($port) = @_;
	my $s = IO::Socket::INET->new(LocalAddr => "127.0.0.1:$port", Proto => 'udp')
		or die "udp $port: $!";
	open my $r, '>', "$d/ready_$port"; close $r;
	local $SIG{TERM} = sub { exit 0 };
	while (defined $s->recv(my $b, 65536)) {
		$s->send("echo:$b");
	}
}

Test::Sluice::_release_ports();
my $b = port(8081, udp => 1);
$t->run_daemon(\&echo, $b);
$t->waitforfile("$d/ready_$b") or die "udp echo";
$t->run();
is(scalar($t->started_workers(2)), 2, 'two workers');

sub answer {
	my ($s) = @_;
	return undef unless IO::Select->new($s)->can_read(3);
	my $got;
	return defined $s->recv($got, 65536) ? $got : undef;
}

sub lines {
	my ($port) = @_;
	return grep { /^$port / } split /\n/, $t->read_file('udp.log');
}

# Ten clients, five datagrams each: a session of five per client.
sub sessions {
	my ($port) = @_;
	my $ok = 0;
	for my $c (1 .. 10) {
		my $s = IO::Socket::INET->new(PeerAddr => "127.0.0.1:$port", Proto => 'udp') or die;
		for my $i (1 .. 5) {
			$s->send("c$c-$i");
			$ok++ if (answer($s) // '') eq "echo:c$c-$i";
		}
	}
	return $ok;
}

my $rp = port(8070, udp => 1);
is(sessions($rp), 50, 'reuseport: every datagram answered');
ok(poll_until(sub { lines($rp) >= 10 }, 5), 'reuseport: sessions logged');
my @rp = lines($rp);
is(scalar(grep { / 200 \d+$/ } @rp), 10, 'reuseport: one session per client');
is(scalar(grep { / 200 (?:20|25)$/ } @rp), 10, 'reuseport: each with its five datagrams');

# Without reuseport: every datagram is still answered, whichever worker
# reads it (a worker that did not start the session starts another).
my $sp = port(8071, udp => 1);
is(sessions($sp), 50, 'shared socket: every datagram answered');
# Sessions split across the workers wait for datagrams that went to the
# other one, and end at proxy_timeout: each datagram counted once.
my $sum = sub { my $n = 0; $n += (split / /)[3] for lines($sp); $n };
ok(poll_until(sub { $sum->() == 4 * 45 + 5 * 5 }, 8), 'shared socket: every byte in one session');
cmp_ok(scalar(lines($sp)), '>=', 10, 'shared socket: at least a session per client');

# Binary upgrade: the new master takes the UDP sockets over.
my $old = $t->master();
kill 'USR2', $old;
my $new;
ok(poll_until(sub {
	$new = -e "$d/sluice.pid" ? $t->read_file('sluice.pid') : '';
	chomp $new;
	$new ne '' && $new != $old && -e "$d/sluice.pid.oldbin";
}, 10), 'a new master');
kill 'WINCH', $old;
ok(poll_until(sub { !$t->worker_pids() }, 10), 'old workers gone');
like($t->read_file('error.log'), qr/using inherited sockets from "(\d+;){3,}"/,
	'the UDP sockets inherited');
my $s = IO::Socket::INET->new(PeerAddr => "127.0.0.1:$rp", Proto => 'udp') or die;
$s->send('upgraded');
is(answer($s), 'echo:upgraded', 'UDP served by the new binary');
kill 'QUIT', $old;
$t->wait_exit(10);
$t->{_master} = $new;

# Config errors with file:line.
$t->write_file('bad.conf', "events {}\nstream {\nserver {\nlisten 127.0.0.1:1 udp ssl;\nreturn x;\n}\n}\n");
my (undef, undef, $err) = $t->run_binary('-t', '-p', "$d/", '-c', "$d/bad.conf");
like($err, qr/\[emerg\] "ssl" parameter is incompatible with "udp" in \S+bad\.conf:4$/m,
	'udp with ssl refused');

$t->stop();
$t->stop_daemons();
