#!/usr/bin/perl

# Graceful stop (QUIT): listeners close, idle connections close at once, an
# in-flight request finishes, workers exit 0, the master removes its pid file.
# worker_shutdown_timeout bounds the wait.

use warnings;
use strict;

use Test::More;
use IO::Select;
use Time::HiRes qw/time sleep/;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;

my $t = Test::Sluice->new()->has(qw/http/)->plan(14);

$t->write_file_expand('sluice.conf', <<'EOF');

%%TEST_GLOBALS%%

events {
}

http {
    server {
        listen 127.0.0.1:%%PORT_8080%%;
        location / { return 200 "done"; }
    }
}

EOF

$t->run();

# Reads until EOF or $secs; returns (data, got_eof).
sub read_until_eof {
	my ($s, $secs) = @_;
	my $sel = IO::Select->new($s);
	my $data = '';
	my $end = time() + $secs;
	while (time() < $end) {
		next unless $sel->can_read($end - time());
		my $n = $s->sysread(my $buf, 4096);
		return ($data, 1) unless $n;
		$data .= $buf;
	}
	return ($data, 0);
}

my $inflight = http("GET / HTTP/1.0\nHost: localhost\n", start => 1);
my $idle = http("GET / HTTP/1.1\nHost: localhost\n\n", start => 1);
my $silent = http('', start => 1);

# Make sure the keep-alive connection has its response and is idle now.
my $sel = IO::Select->new($idle);
$sel->can_read(5);
$idle->sysread(my $first, 4096);
like($first, qr/done$/, 'keep-alive response');

my $pid_file = $t->pid_file();
ok(-e $pid_file, 'pid file exists while running');
my $master = $t->master();

$t->signal('QUIT');
ok($t->waitforlog(qr/gracefully shutting down/), 'worker shutting down');

my (undef, $eof) = read_until_eof($idle, 3);
ok($eof, 'idle keep-alive connection closed');
(undef, $eof) = read_until_eof($silent, 3);
ok($eof, 'connection without a request closed');

ok(!IO::Socket::INET->new(PeerAddr => '127.0.0.1:' . port(8080), Proto => 'tcp'),
	'listener closed');

# The in-flight request is still being served.
$inflight->syswrite("\r\n");
my ($resp) = read_until_eof($inflight, 5);
like($resp, qr/^HTTP\/1\.1 200 OK.*done$/s, 'in-flight request finished');

ok($t->wait_exit(10), 'master exited');
ok(!-e $pid_file, 'pid file removed');
like($t->read_file('error.log'), qr/worker process \d+ exited with code 0/, 'worker exit code 0');

# worker_shutdown_timeout closes what is still open.

my $t2 = Test::Sluice->new();
$t2->write_file_expand('sluice.conf', <<'EOF');

%%TEST_GLOBALS%%
worker_shutdown_timeout 500ms;

events {
}

http {
    server {
        listen 127.0.0.1:%%PORT_8082%%;
        location / { return 200 "done"; }
    }
}

EOF
$t2->run();

my $stuck = http("GET / HTTP/1.0\nHost: localhost\n", start => 1,
	PeerAddr => '127.0.0.1:' . port(8082));
sleep 0.2;
my $start = time();
$t2->signal('QUIT');
ok($t2->wait_exit(10), 'master exited with a request still open');
like($t2->read_file('error.log'), qr/worker_shutdown_timeout: closing 1 connection.*exited with code 0/s,
	'timeout closed the connection');
$t2->stop();

# QUIT right after HUP: the generation the HUP was starting stops too, as
# nginx's; no worker is left behind.
my $t3 = Test::Sluice->new();
$t3->write_file_expand('sluice.conf', <<'EOF2');

%%TEST_GLOBALS%%

worker_processes 2;

events {
}

http {
    server {
        listen 127.0.0.1:%%PORT_8083%%;
        location / { return 200 "done"; }
    }
}

EOF2
$t3->run();
my %seen = map { $_ => 1 } $t3->started_workers(2);
$t3->signal('HUP');
$t3->signal('QUIT');
for (1 .. 20) {
	$seen{$_} = 1 for $t3->worker_pids();
	select(undef, undef, undef, 0.05);
}
ok($t3->wait_exit(10), 'QUIT right after HUP: the master exits');
my @left;
for (1 .. 50) {
	@left = grep { kill 0, $_ } keys %seen;
	last unless @left;
	select(undef, undef, undef, 0.1);
}
is("@left", '', 'QUIT right after HUP: no worker left');
$t3->stop();
