#!/usr/bin/perl

# A worker that does not accept does not spin. Its listening socket is
# registered level-triggered (one accept per turn, as nginx's), so while
# connections wait in the listen queue and the worker cannot take them,
# the socket leaves the event loop:
# - out of worker_connections, the worker waits for a free slot; its CPU
#   time stays flat, and the waiting connections are served, in turn, once
#   slots free up;
# - out of descriptors (worker_rlimit_nofile), accept() fails: logged at
#   crit as nginx logs it, tried again after a back-off, CPU time flat, and
#   the waiting client is served once descriptors are free.

use warnings;
use strict;

use Test::More;
use IO::Select;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;

my $t = Test::Sluice->new()->has(qw/http/)->plan(10)
	->expect_errors(qr/accept\(\) failed \(24: Too many open files\)/);

$t->write_file_expand('sluice.conf', <<'EOF');

%%TEST_GLOBALS%%

events {
    worker_connections 1;
}

http {
    access_log off;
    client_header_timeout 30s;

    server {
        listen 127.0.0.1:%%PORT_8080%%;
        location / { return 200 "ok $request_uri\n"; }
    }
}

EOF

$t->run();

my ($w) = $t->started_workers();
ok($w, 'a worker');

# The one slot: a request whose head never ends (not idle, not reclaimed).
my $hold = http("GET /hold HTTP/1.1\nHost: localhost\n", start => 1);
select(undef, undef, undef, 0.3);

# Two more clients: one is accepted and waits for the slot, the other waits
# in the listen queue.
my @wait = map {
	my $s = http("GET /wait$_ HTTP/1.0\nHost: localhost\n\n", start => 1);
	select(undef, undef, undef, 0.2);
	$s;
} 1 .. 2;

my $before = $t->cpu_ticks($w);
select(undef, undef, undef, 1.5);
my $used = $t->cpu_ticks($w) - $before;
# Spinning would use the whole 1.5 s (about 150 ticks).
ok($used < 30, "worker waiting for a slot does not spin ($used ticks in 1.5 s)");
ok(!IO::Select->new(@wait)->can_read(0), 'the waiting clients have no answer yet');
ok($t->waitforlog(qr/\[warn\] .*1 worker_connections are not enough, waiting for a free one/),
	'logged as nginx');

# The held request ends: the waiting ones are served, one after another.
close $hold;
like(http_end($wait[0], timeout => 5), qr/ok \/wait1$/m, 'first waiting client served');
like(http_end($wait[1], timeout => 5), qr/ok \/wait2$/m, 'second waiting client served');

$t->stop();

###############################################################################
# Out of descriptors.

$t->write_file_expand('sluice.conf', <<'EOF');

%%TEST_GLOBALS%%

worker_rlimit_nofile 64;

events {
    worker_connections 1000;
}

http {
    access_log off;
    keepalive_timeout 60s;

    server {
        listen 127.0.0.1:%%PORT_8080%%;
        location / { return 200 "ok $request_uri\n"; }
    }
}

EOF

$t->run();

($w) = $t->started_workers();

# Keep-alive connections, one after another, until one is not answered:
# the worker has no descriptor left to accept it.
my (@open, $waiting);
for my $i (1 .. 80) {
	my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1:' . port(8080), Proto => 'tcp', Timeout => 5)
		or last;
	$s->syswrite("GET /c$i HTTP/1.1\r\nHost: localhost\r\n\r\n");
	if (!IO::Select->new($s)->can_read(1)) {
		$waiting = $s;
		last;
	}
	my $r = '';
	$s->sysread($r, 4096);
	push @open, $s;
}
ok($waiting && @open > 10, 'out of descriptors after ' . scalar(@open) . ' connections');
ok($t->waitforlog(qr/\[crit\] .*accept\(\) failed \(24: Too many open files\)/), 'accept() failed, logged at crit');

$before = $t->cpu_ticks($w);
select(undef, undef, undef, 1.5);
$used = $t->cpu_ticks($w) - $before;
# A failed accept every 100 ms; spinning would use the whole 1.5 s.
ok($used < 30, "no spin while accept() fails ($used ticks in 1.5 s)");

# Descriptors free up: the waiting client is accepted and answered.
close $_ for splice @open, 0, 5;
my $r = '';
$waiting->sysread($r, 4096) if IO::Select->new($waiting)->can_read(5);
like($r, qr/ok \/c\d+$/m, 'waiting client served once descriptors are free');
