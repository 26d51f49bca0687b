#!/usr/bin/perl

# How workers are set up, as nginx sets them up: worker_priority (nice),
# worker_cpu_affinity (one mask per worker, the last one for the rest),
# worker_rlimit_core, working_directory, and env (workers keep TZ and the
# listed variables only, with the values env gives). Read from /proc of the
# running workers. Then the directives' errors with file:line.

use warnings;
use strict;

use Test::More;
use Time::HiRes qw/sleep/;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;

my $t = Test::Sluice->new()->has(qw/http/)->plan(9);
my $d = $t->testdir();

$t->write_file_expand('sluice.conf', <<'EOF');

%%TEST_GLOBALS%%

worker_processes 2;
worker_priority 7;
worker_cpu_affinity 01 01;
worker_rlimit_core 3m;
working_directory %%TESTDIR%%;
env SLUICE_TEST_KEEP;
env TZ=XXX+5;

events {
}

http {
    log_format tz "$time_local";
    server {
        listen 127.0.0.1:%%PORT_8080%%;
        location / { return 200 "ok"; }
        access_log %%TESTDIR%%/tz.log tz;
    }
}

EOF

$ENV{SLUICE_TEST_KEEP} = 'kept';
$ENV{SLUICE_TEST_DROP} = 'dropped';
$ENV{TZ} = 'UTC';
$t->run();
delete @ENV{qw/SLUICE_TEST_KEEP SLUICE_TEST_DROP TZ/};

my @w;
for (1 .. 100) {
	@w = $t->worker_pids();
	last if @w == 2;
	sleep 0.05;
}
is(scalar @w, 2, 'two workers');
my $w = $w[-1];

# The worker sets itself up after fork (priority, affinity, limits, then its
# directory): wait until it has got that far before reading /proc.
for (1 .. 100) {
	last if (readlink("/proc/$w/cwd") // '') eq $d;
	sleep 0.05;
}

sub slurp { my ($f) = @_; open my $fh, '<', $f or return ''; local $/; my $s = <$fh>; $s // '' }

# pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt majflt
# cmajflt utime stime cutime cstime priority nice
my ($nice) = slurp("/proc/$w/stat") =~ /\)\s+(?:\S+\s+){16}(-?\d+)/;
is($nice, 7, 'worker_priority');
my ($master_nice) = slurp('/proc/' . $t->master() . '/stat') =~ /\)\s+(?:\S+\s+){16}(-?\d+)/;
isnt($master_nice, 7, '... not the master');

like(slurp("/proc/$w/status"), qr/^Cpus_allowed_list:\s+0$/m, 'worker_cpu_affinity');
like(slurp("/proc/$w/limits"), qr/^Max core file size\s+3145728\s+3145728/m, 'worker_rlimit_core');
is(readlink("/proc/$w/cwd"), $d, 'working_directory');

# /proc/PID/environ shows the environment the process started with, not
# what the worker keeps; env NAME=VALUE shows in the local time it logs
# (the time zone is looked up again a second after the last lookup).
sleep 1.2;
like(http_get('/'), qr/ok\z/, 'serves');
$t->stop();
like($t->read_file('tz.log'), qr/ -0500\]?$/m, 'env TZ=... applies in the worker');

# Errors.
$t->write_file('bad.conf', "worker_priority 30;\nevents {}\n");
my $out = `$Test::Sluice::BINARY -t -p $d/ -c $d/bad.conf 2>&1`;
like($out, qr/\[emerg\] .*invalid number in \Q$d\E\/bad\.conf:1/, 'worker_priority out of range');
