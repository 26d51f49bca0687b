#!/usr/bin/perl

# daemon on: the foreground process exits 0 only once the daemon has written its
# pid file; -s reload/reopen/quit reach the master through that file, which is
# removed on exit. master_process off: one process serves.

use warnings;
use strict;

use Test::More;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;

my $t = Test::Sluice->new()->has(qw/http/)->plan(18);
my $d = $t->testdir();

my $conf = <<'EOF';

pid %%TESTDIR%%/daemon.pid;
error_log %%TESTDIR%%/error.log debug;

events {
}

http {
    server {
        listen 127.0.0.1:%%PORT_8080%%;
        location / { return 200 "TEXT"; }
    }
}

EOF

(my $c = $conf) =~ s/TEXT/one/;
$t->write_file_expand('sluice.conf', $c);

my @args = ('-p', "$d/", '-c', 'sluice.conf', '-e', 'error.log');
my ($rc) = $t->run_binary(@args);
is($rc, 0, 'foreground process exits 0');
ok(-e "$d/daemon.pid", 'pid file exists as soon as it returns');
my $pid = $t->read_file('daemon.pid');
chomp $pid;
like($pid, qr/^\d+$/, 'pid file holds a pid');
ok(kill(0, $pid), 'daemon is running');
like(http_get('/'), qr/one$/, 'daemon serves');

# The daemon is not our child and has its own session.
my $stat = $t->read_file("/proc/$pid/stat");
my ($ppid, $pgrp, $sid) = $stat =~ /\)\s+\S+\s+(\d+)\s+(\d+)\s+(\d+)/;
isnt($ppid, $$, 'not our child');
is($sid, $pid, 'session leader');

# -s reload through the pid file.
($c = $conf) =~ s/TEXT/two/;
$t->write_file_expand('sluice.conf', $c);
($rc) = $t->run_binary(@args, '-s', 'reload');
is($rc, 0, '-s reload exit code');
ok($t->waitforlog(qr/exited with code 0/) && http_get('/') =~ /two$/, 'reloaded by -s reload');

($rc) = $t->run_binary(@args, '-s', 'quit');
is($rc, 0, '-s quit exit code');
my $gone = 0;
for (1 .. 100) { $gone = 1, last unless kill(0, $pid); select(undef, undef, undef, 0.05); }
ok($gone, 'daemon stopped by -s quit');
ok(!-e "$d/daemon.pid", 'pid file removed');

# master_process off: the process we started is the server.
($c = $conf) =~ s/TEXT/single/;
$c = "daemon off;\nmaster_process off;\n" . $c;
$t->write_file_expand('sluice.conf', $c);
$t->run(pid_file => "$d/daemon.pid");
is($t->master(), $t->{_child}, 'single process is the pid in the file');
like(http_get('/'), qr/single$/, 'single process serves');
$t->signal('HUP');
ok($t->waitforlog(qr/\[warn\] .*reload needs "master_process on"/), 'HUP without a master warns');
like(http_get('/'), qr/single$/, 'and the process goes on');
$t->stop();

# -s reopen and -s stop on a daemon.
($c = $conf) =~ s/TEXT/three/;
$t->write_file_expand('sluice.conf', $c);
($rc) = $t->run_binary(@args);
$pid = $t->read_file('daemon.pid');
chomp $pid;
rename("$d/error.log", "$d/error.log.old");
($rc) = $t->run_binary(@args, '-s', 'reopen');
ok($rc == 0 && $t->waitforfile("$d/error.log"), '-s reopen opened a new log');
($rc) = $t->run_binary(@args, '-s', 'stop');
$gone = 0;
for (1 .. 100) { $gone = 1, last unless kill(0, $pid); select(undef, undef, undef, 0.05); }
ok($rc == 0 && $gone && !-e "$d/daemon.pid", '-s stop');
