#!/usr/bin/perl

# Workers: kill -9 is respawned and logged as nginx logs it; a TERM from
# outside exits 0 and is respawned; USR1 reopens the logs after a rename;
# WINCH stops the workers and keeps the master; TERM stops everything fast.

use warnings;
use strict;

use Test::More;
use Time::HiRes qw/sleep/;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;

my $t = Test::Sluice->new()->has(qw/http/)->plan(13);

$t->write_file_expand('sluice.conf', <<'EOF');

%%TEST_GLOBALS%%

worker_processes 2;

events {
}

http {
    server {
        listen 127.0.0.1:%%PORT_8080%%;
        location / { return 200 "pid $pid"; }
    }
}

EOF

$t->run();

sub wait_workers {
	my ($n, @not) = @_;
	my %gone = map { $_ => 1 } @not;
	for (1 .. 100) {
		my @all = $t->worker_pids();
		my @w = grep { !$gone{$_} } @all;
		return @w if @w == $n && @all == $n;
		sleep 0.05;
	}
	return $t->worker_pids();
}

my @w = wait_workers(2);
is(scalar @w, 2, 'two workers');

# kill -9: an [alert], then a new worker in the same place.
$t->expect_errors(qr/\[alert\] .*worker process $w[0] exited on signal 9/);
kill 'KILL', $w[0];
ok($t->waitforlog(qr/\[alert\] \d+#0: worker process $w[0] exited on signal 9/), 'killed worker logged');
my @after = wait_workers(2, $w[0]);
is(scalar(grep { $_ == $w[0] } @after), 0, 'killed worker replaced');
is(scalar @after, 2, 'respawned');
like(http_get('/'), qr/\r\n\r\npid \d+$/, 'serving after respawn');

# TERM from outside: exit code 0, [notice] only, respawned.
kill 'TERM', $after[1];
ok($t->waitforlog(qr/\[notice\] \d+#0: worker process $after[1] exited with code 0/), 'TERM exit code 0');
my @again = wait_workers(2, $after[1]);
is(scalar @again, 2, 'respawned after TERM');

# USR1 after a rename: the old file stops growing, a new one is written.
rename($t->testdir() . '/error.log', $t->testdir() . '/error.log.1') or die "rename: $!";
$t->signal('USR1');
# As in nginx, "reopening logs" is the last line each process writes to the
# old file: the signal line, the master's, and one per worker.
ok($t->waitforlog(sub { (() = $_[0] =~ /reopening logs/g) >= 4 }, 5, 'error.log.1'),
	'master and both workers reopened');
like($t->read_file('error.log.1'), qr/signal 10 \(SIGUSR1\) received from \d+, reopening logs/,
	'signal logged before the reopen');
# The workers (unprivileged when run as root) write to the new file.
http("GET / HTTP/1.0\nHost: a..b\n\n") for 1 .. 4;
ok($t->waitforlog(qr/\[info\] \d+#0: \*\d+ client sent invalid host header/),
	'worker writes to the new file');

# WINCH: workers go, the master stays; HUP brings workers back.
$t->signal('WINCH');
my @none = wait_workers(0);
ok($t->waitforlog(qr/SIGWINCH/) && !@none, 'WINCH stopped workers');
ok(kill(0, $t->master()), 'master still running');

# TERM: fast stop.
$t->signal('TERM');
ok($t->wait_exit(5), 'TERM stopped the master');
