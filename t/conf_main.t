#!/usr/bin/perl

# Main and events context through the real binary: worker_processes, user,
# worker_rlimit_nofile, error_log levels and several logs, ignored events
# directives with a warning, config errors at start-up with no pid file.

use warnings;
use strict;

use Test::More;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;

my $t = Test::Sluice->new()->has(qw/http/)->plan(16);
my $d = $t->testdir();

$t->write_file_expand('sluice.conf', <<'EOF');

pid %%TESTDIR%%/sluice.pid;
error_log %%TESTDIR%%/error.log debug;
error_log %%TESTDIR%%/warn.log warn;
daemon off;

worker_processes 3;
worker_rlimit_nofile 777;
user root;

events {
    worker_connections 64;
    use epoll;
    multi_accept on;
    accept_mutex off;
    accept_mutex_delay 100ms;
    worker_aio_requests 32;
    debug_connection 127.0.0.1;
}

http {
    client_body_temp_path %%TESTDIR%%/tmp/body 1 2;
    server {
        listen 127.0.0.1:%%PORT_8080%%;
        location / { proxy_temp_path %%TESTDIR%%/tmp/proxy; return 200 "pid $pid"; }
    }
}

EOF

$t->run();

my @w = $t->worker_pids();
for (1 .. 50) { last if @w == 3; select(undef, undef, undef, 0.05); @w = $t->worker_pids(); }
is(scalar @w, 3, 'worker_processes 3');

my $limits = $t->read_file("/proc/$w[0]/limits");
like($limits, qr/Max open files\s+777\s+777/, 'worker_rlimit_nofile');

my $status = $t->read_file("/proc/$w[0]/status");
my ($uid) = $status =~ /^Uid:\s+(\d+)/m;
SKIP: {
	skip 'not root', 1 unless $> == 0;
	is($uid, 0, 'user root keeps workers as root');
}

like($t->read_file('error.log'), qr/\[warn\] \d+#0: the "use" directive is ignored.* in \Q$d\E\/sluice\.conf:13/,
	'ignored events directive warns with file:line');
unlike($t->read_file('warn.log'), qr/\[notice\]/, 'warn-level log has no notices');
like($t->read_file('error.log'), qr/\[notice\] \d+#0: start worker processes/, 'debug log has notices');
ok(-d "$d/tmp/body" && -d "$d/tmp/proxy", 'temp paths created');
is(() = $t->read_file('error.log') =~ /\[warn\] .*directive is ignored/g, 5, 'each ignored events directive warns');
unlike($t->read_file('error.log'), qr/"multi_accept" directive is ignored/, 'multi_accept is not ignored');
# An [info] line from a worker reaches the debug log only.
http("GET / HTTP/1.0\nHost: a..b\n\n");
ok($t->waitforlog(qr/\[info\] .*invalid host header/) && $t->read_file('warn.log') !~ /\[info\]/,
	'levels filter per log');

$t->stop();

# Without `user`, workers run as nobody when the master is root.

$t->write_file_expand('sluice.conf', <<'EOF');
%%TEST_GLOBALS%%
events { }
http { server { listen 127.0.0.1:%%PORT_8080%%; location / { return 204; } } }
EOF
$t->run();
@w = $t->worker_pids();
for (1 .. 50) { last if @w; select(undef, undef, undef, 0.05); @w = $t->worker_pids(); }
($uid) = $t->read_file("/proc/$w[0]/status") =~ /^Uid:\s+(\d+)/m;
SKIP: {
	skip 'not root', 1 unless $> == 0;
	is($uid, scalar getpwnam('nobody'), 'workers drop to nobody');
}
like(http_get('/'), qr/^HTTP\/1\.1 204 No Content/, 'serves as nobody');
$t->stop();

# Start-up errors: exit code 1, [emerg] with file:line, no pid file.

$t->write_file_expand('sluice.conf', <<'EOF');
%%TEST_GLOBALS%%
events { }
user no-such-user-here;
EOF
my ($rc, $out, $err) = $t->run_binary('-p', "$d/", '-c', 'sluice.conf', '-e', 'error.log');
is($rc, 1, 'unknown user refused');
like($err, qr/getpwnam\("no-such-user-here"\) failed/, 'unknown user message')
	or skip 'not root', 0;

$t->write_file_expand('sluice.conf', <<'EOF');
%%TEST_GLOBALS%%
events { }
http { server { listen 127.0.0.1:%%PORT_8080%%; listen 127.0.0.1:%%PORT_8080%%; } }
EOF
($rc, $out, $err) = $t->run_binary('-p', "$d/", '-c', 'sluice.conf', '-e', 'error.log');
like($err, qr/duplicate listen 127\.0\.0\.1:\d+ in \Q$d\E\/sluice\.conf:6/, 'duplicate listen');
ok(!-e "$d/sluice.pid", 'no pid file after a failed start');

$t->expect_errors(qr/getpwnam|duplicate listen/);
