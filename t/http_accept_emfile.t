#!/usr/bin/perl

# Out of descriptors (worker_rlimit_nofile), a worker's accept() fails:
# logged at crit as nginx logs it, tried again after a back-off, without
# spinning while connections wait in the listen queue (the level-triggered
# listening socket leaves the event loop for the back-off), and the waiting
# client is served once descriptors are free.

use warnings;
use strict;

use Test::More;
use IO::Select;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;

my $t = Test::Sluice->new()->has(qw/http/)->plan(4)
	->expect_errors(qr/accept\(\) failed \(24: Too many open files\)/);

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

my ($w) = $t->worker_pids();
for (1 .. 50) { last if $w; select(undef, undef, undef, 0.05); ($w) = $t->worker_pids(); }

sub ticks {
	my $stat = $t->read_file("/proc/$w/stat") // '';
	my @f = split ' ', ($stat =~ /\)\s+(.*)/ ? $1 : '');
	return ($f[11] // 0) + ($f[12] // 0);
}

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

my $before = ticks();
select(undef, undef, undef, 1.5);
my $used = ticks() - $before;
# A failed accept every 100 ms; spinning would use the whole 1.5 s.
ok($used < 30, "no spin while accept() fails ($used ticks in 1.5 s)");

# Descriptors free up: the waiting client is accepted and answered.
close $_ for splice @open, 0, 5;
my $r = '';
$waiting->sysread($r, 4096) if IO::Select->new($waiting)->can_read(5);
like($r, qr/ok \/c\d+$/m, 'waiting client served once descriptors are free');
