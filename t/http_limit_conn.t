#!/usr/bin/perl

# The limit_conn module in http and stream: requests in progress per key,
# counted in a zone shared by both workers. Two slow proxied requests are in
# progress, a third is refused with 503 and nginx's line; once they end the
# count is back (a new request passes). limit_conn_status, dry run and
# $limit_conn_status. In stream, sessions to a silent backend count until
# they end; one beyond the limit is closed at once with status 503. A worker
# killed while holding counts: the master takes them back.

use warnings;
use strict;

use Test::More;
use IO::Socket::INET;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;

my $t = Test::Sluice->new()->has(qw/http proxy limit_conn stream/)->plan(17);
my $d = $t->testdir();

$t->write_file_expand('sluice.conf', <<'EOF');

%%TEST_GLOBALS%%

worker_processes 2;

events {
}

http {
    log_format st "$uri $limit_conn_status $status";
    access_log %%TESTDIR%%/access.log st;

    limit_conn_zone $server_port zone=conns:1m;
    limit_conn_zone $server_port zone=dry:1m;

    server {
        listen 127.0.0.1:%%PORT_8080%% reuseport;

        location /slow/ {
            limit_conn conns 2;
            proxy_pass http://127.0.0.1:%%PORT_8081%%;
        }
        location /status/ {
            limit_conn conns 2;
            limit_conn_status 429;
            limit_conn_log_level warn;
            proxy_pass http://127.0.0.1:%%PORT_8081%%;
        }
        location /dry/ {
            limit_conn dry 1;
            limit_conn_dry_run on;
            proxy_pass http://127.0.0.1:%%PORT_8081%%/slow/1/;
        }
    }
}

stream {
    log_format st "$limit_conn_status $status";
    access_log %%TESTDIR%%/stream.log st;
    limit_conn_zone $binary_remote_addr zone=s:1m;
    limit_conn s 1;

    server {
        listen 127.0.0.1:%%PORT_8082%% reuseport;
        proxy_pass 127.0.0.1:%%PORT_8083%%;
    }
}

EOF

$t->backend(port(8081));
# A stream backend that accepts and keeps connections open, silent.
$t->run_daemon(sub {
	my $l = IO::Socket::INET->new(LocalAddr => '127.0.0.1:' . port(8083),
		Listen => 16, ReuseAddr => 1) or die;
	my @keep;
	while (my $c = $l->accept()) { push @keep, $c; }
});
$t->run();
$t->waitforsocket('127.0.0.1:' . port(8083));

sub code {
	my ($r) = @_;
	return ($r // '') =~ m{^HTTP/1\.[01] (\d+)} ? $1 : 'none';
}

# Two slow requests in progress (on new connections: either worker).
my @slow = map { http_get('/slow/1.5/x', start => 1) } 1 .. 2;
select(undef, undef, undef, 0.4);
is(code(http_get('/slow/0/y')), 503, 'third request in progress refused');
ok($t->waitforlog(qr/\[error\] .*limiting connections by zone "conns", client: 127\.0\.0\.1/),
	'logged as nginx');
is(code(http_get('/status/0')), 429, 'limit_conn_status');
ok($t->waitforlog(qr/\[warn\] .*limiting connections by zone "conns"/), 'limit_conn_log_level');
is(join(' ', map { code(http_end($_)) } @slow), '200 200', 'slow ones served');
is(code(http_get('/slow/0/z')), 200, 'count released when requests end');

# Dry run: passes, logged, $limit_conn_status.
my $dry = http_get('/dry/a', start => 1);
select(undef, undef, undef, 0.3);
is(code(http_get('/dry/b')), 200, 'dry run passes');
ok($t->waitforlog(qr/limiting connections, dry run, by zone "dry"/), 'dry run logged');
http_end($dry);
ok($t->waitforlog(qr{^/slow/0/z PASSED 200$}m, 3, 'access.log'), '$limit_conn_status PASSED');
like($t->read_file('access.log'), qr{^/slow/0/y REJECTED 503$}m, '$limit_conn_status REJECTED');
like($t->read_file('access.log'), qr{^/dry/b REJECTED_DRY_RUN 200$}m,
	'$limit_conn_status REJECTED_DRY_RUN');

# Stream: one session per address.
my $s1 = IO::Socket::INET->new(PeerAddr => '127.0.0.1:' . port(8082)) or die;
select(undef, undef, undef, 0.3);
my $s2 = IO::Socket::INET->new(PeerAddr => '127.0.0.1:' . port(8082)) or die;
ok(closed_within($s2, 3), 'second stream session closed');
ok($t->waitforlog(qr/limiting connections by zone "s"/), 'stream refusal logged');
ok($t->waitforlog(qr/^REJECTED 503$/m, 3, 'stream.log'), 'stream $status 503');
close $s1;
ok(poll_until(sub {
	my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1:' . port(8082)) or return 0;
	my $open = !closed_within($s, 0.3);
	close $s;
	$open;
}), 'stream count released when the session ends');

# A worker dies while a session holds a count: the master takes it back.
my $held = IO::Socket::INET->new(PeerAddr => '127.0.0.1:' . port(8082)) or die;
select(undef, undef, undef, 0.3);
my @before = $t->worker_pids();
kill 'KILL', @before;
$t->expect_errors(qr/worker process \d+ exited on signal 9/);
ok(poll_until(sub { my @w = $t->worker_pids(); @w == 2 && !grep { my $p = $_; grep { $_ == $p } @before } @w }, 5),
	'workers respawned');
ok(poll_until(sub {
	my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1:' . port(8082)) or return 0;
	my $open = !closed_within($s, 0.3);
	close $s;
	$open;
}), 'counts of the dead worker taken back');
