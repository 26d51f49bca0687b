#!/usr/bin/perl

# accept_balance (on by default): with two workers, keep-alive connections
# opened one after another, which the exclusive wake-up would gather on the
# first worker to wait (t/http_accept_exclusive.t, with it off), are shared:
# a worker more than 4 connections over its share stops accepting until the
# other has caught up. HTTP and stream listeners alike; every connection is
# served; a worker out comes back by itself when a connection waits that
# the other does not take.

use warnings;
use strict;

use Test::More;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;

my $t = Test::Sluice->new()->has(qw/http stream/)->plan(11);

$t->write_file_expand('sluice.conf', <<'EOF');

pid %%TESTDIR%%/sluice.pid;
error_log %%TESTDIR%%/error.log debug;
daemon off;
worker_processes 2;

events { worker_connections 128; }

http {
    access_log off;
    server {
        listen 127.0.0.1:%%PORT_8080%%;
        location / { return 200 "pid $pid\n"; }
    }
}

stream {
    server {
        listen 127.0.0.1:%%PORT_8082%%;
        proxy_pass 127.0.0.1:%%PORT_8081%%;
    }
}

EOF

$t->backend(port(8081));
$t->run();

my @w;
poll_until(sub { @w = $t->worker_pids(); @w == 2 }, 2.5);
is(scalar @w, 2, 'two workers');
http_get('/');
select(undef, undef, undef, 0.5);

# The first worker takes 9 (9 of 9 is more than 4 over a share of 4.5),
# then the other until the first is within 2 of its share, and so on: of
# 24, no more than 16 end up on one. Without the balance, 20 or more land
# on one.
sub shared_ok {
	my ($what, %pids) = @_;
	my @ours = grep { my $p = $_; grep { $_ eq $p } @w } keys %pids;
	my @n = sort { $b <=> $a } map { $pids{$_} } @ours;
	is(scalar @ours, 2, "$what: both workers took connections, and nobody else answered")
		or diag(explain(\%pids));
	ok(@n && $n[0] <= 16 && $n[0] + ($n[1] // 0) == 24,
		"$what: all 24 answered, at most 16 by one worker") or diag(explain(\%pids));
}

# Once a test's connections are closed, until the workers have closed
# their side too (none established or waiting to close on the port, as
# ss(8) sees them), bounded: their counts are back to none. Without ss, a
# pause.
sub settled {
	my ($port) = @_;
	return select(undef, undef, undef, 0.3) unless `ss -V 2>/dev/null` =~ /\d/;
	poll_until(sub {
		`ss -tnH state established state close-wait '( sport = :$port )' 2>/dev/null` !~ /\S/
	}, 5);
	select(undef, undef, undef, 0.05);
}

shared_ok('http', pids_answering(port(8080), 24, sub { keepalive_get($_[0], '/') }));
# The connections above are closed: the counts go back to none.
settled(port(8080));

# Stream sessions (proxied to a backend that keeps them open): which
# worker holds each, as ss(8) sees the accepted sockets.
SKIP: {
	skip 'no ss(8)', 2 unless `ss -V 2>/dev/null` =~ /\d/;
	my @open;
	for (1 .. 24) {
		my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1:' . port(8082), Proto => 'tcp', Timeout => 5)
			or next;
		keepalive_get($s, '/');
		push @open, $s;
		select(undef, undef, undef, 0.02);
	}
	my $port = port(8082);
	my %held;
	$held{$_}++ for `ss -tnpH state established '( sport = :$port )' 2>/dev/null` =~ /pid=(\d+)/g;
	close $_ for @open;
	shared_ok('stream', %held);
}

# A burst: 40 connections opened at once, each asking once they are all
# open, are shared too.
my @burst = map { IO::Socket::INET->new(PeerAddr => '127.0.0.1:' . port(8080), Proto => 'tcp', Timeout => 5) } 1 .. 40;
my %b;
for my $s (@burst) {
	my $r = $s ? keepalive_get($s, '/') // '' : '';
	$b{$r =~ /pid (\d+)/ ? $1 : 'none'}++;
}
close $_ for grep { $_ } @burst;
my @bn = sort { $b <=> $a } map { $b{$_} } grep { $_ ne 'none' } keys %b;
ok(@bn == 2 && $bn[0] + $bn[1] == 40 && $bn[0] <= 30, 'a burst of 40 is shared too')
	or diag(explain(\%b));

# A worker out comes back on its own when a connection waits and the other
# worker does not take it: here the other is stopped (SIGSTOP, by the pid
# the master gave it). Connections one after another: the first worker
# takes 9 and goes out, the other takes the 10th.
settled(port(8080));
settled(port(8082));
my (%n, @held);
for (1 .. 20) {
	my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1:' . port(8080), Proto => 'tcp', Timeout => 5)
		or next;
	my $r = keepalive_get($s, '/') // '';
	$n{$r =~ /pid (\d+)/ ? $1 : 'none'}++;
	push @held, $s;
	last if keys %n == 2;
	select(undef, undef, undef, 0.02);
}
my ($first) = sort { $n{$b} <=> $n{$a} } keys %n;
my ($other) = grep { $_ ne $first } keys %n;
ok(defined $other && $n{$first} == 9 && $n{$other} == 1
	&& (grep { $_ eq $first } @w) && (grep { $_ eq $other } @w),
	'nine connections on one worker, then the other takes the tenth') or diag(explain(\%n));
my $waiting = '';
if (defined $other && $other =~ /^\d+$/) {
	kill('STOP', $other);
	my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1:' . port(8080), Proto => 'tcp', Timeout => 5);
	$waiting = $s ? keepalive_get($s, '/') // '' : '';
	kill('CONT', $other);
	close $s if $s;
}
like($waiting, qr/pid \Q$first\E\b/, 'the other stopped: the worker out comes back for the waiting connection');
ok($t->waitforlog(qr/accept_balance: back in listening socket \S+ holding \d+ connections \(connections waiting\)/),
	'and says why at debug');
close $_ for @held;

unlike($t->read_file('error.log'), qr/wakes every worker|registered again/, 'every listener registered exclusive');
like($t->read_file('error.log'),
	qr/\[debug\] .*accept_balance: out of listening socket 127\.0\.0\.1:\d+ holding \d+ connections.*\n(?s:.*)accept_balance: back in listening socket 127\.0\.0\.1:\d+ holding \d+ connections \((within its share|connections waiting)\)/,
	'a worker going out and back is logged at debug');
