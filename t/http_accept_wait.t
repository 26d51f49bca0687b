#!/usr/bin/perl

# A worker out of worker_connections stops taking connections without
# spinning: its listening socket is registered level-triggered (one accept
# per turn, as nginx's), so while connections wait in the listen queue and
# the worker waits for a free slot, the socket leaves the event loop. The
# worker's CPU time stays flat meanwhile, and the waiting connections are
# served, in turn, once slots free up.

use warnings;
use strict;

use Test::More;
use IO::Select;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;

my $t = Test::Sluice->new()->has(qw/http/)->plan(6);

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

my ($w) = $t->worker_pids();
for (1 .. 50) { last if $w; select(undef, undef, undef, 0.05); ($w) = $t->worker_pids(); }
ok($w, 'a worker');

# CPU time (user + system, clock ticks) of the worker.
sub ticks {
	my $stat = $t->read_file("/proc/$w/stat") // '';
	my @f = split ' ', ($stat =~ /\)\s+(.*)/ ? $1 : '');
	return ($f[11] // 0) + ($f[12] // 0);
}

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

my $before = ticks();
select(undef, undef, undef, 1.5);
my $used = ticks() - $before;
# Spinning would use the whole 1.5 s (about 150 ticks).
ok($used < 30, "worker waiting for a slot does not spin ($used ticks in 1.5 s)");
ok(!IO::Select->new(@wait)->can_read(0), 'the waiting clients have no answer yet');
ok($t->waitforlog(qr/\[warn\] .*1 worker_connections are not enough, waiting for a free one/),
	'logged as nginx');

# The held request ends: the waiting ones are served, one after another.
close $hold;
like(http_end($wait[0], timeout => 5), qr/ok \/wait1$/m, 'first waiting client served');
like(http_end($wait[1], timeout => 5), qr/ok \/wait2$/m, 'second waiting client served');
