#!/usr/bin/perl

# scripts/install (the steps the Dockerfile runs), without Docker: installs
# the binary under test into a temporary DESTDIR and starts what it
# installed, driven by the installed contrib/sluice.service's own command
# lines (paths moved under DESTDIR): ExecStartPre and ExecStart (a daemon
# that writes the unit's PIDFile), ExecReload (-t, then HUP) refusing a bad
# configuration and applying a good one, contrib/logrotate's postrotate
# (USR1) run by logrotate -f, and ExecStop (QUIT through start-stop-daemon).
# `systemd-analyze verify` checks the unit when systemd-analyze is there.

use warnings;
use strict;

use Test::More;
use Time::HiRes qw/sleep/;
use POSIX ();
use Cwd ();

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;

plan(skip_all => 'the installed configuration runs workers as another user: needs root')
	if $> != 0;
plan(skip_all => 'no start-stop-daemon (the unit\'s ExecStop)') unless -x '/sbin/start-stop-daemon';

my $t = Test::Sluice->new()->has(qw/http/)->plan(49);
my $d = $t->testdir();
my $root = "$d/root";
my $bin = Test::Sluice::binary();
my $p = port(8080);

# The install, with the binary the suite built.
my $out = `../scripts/install --binary $bin --destdir $root 2>&1`;
is($?, 0, 'scripts/install exits 0') or diag($out);
for my $f (qw{usr/sbin/sluice etc/sluice/sluice.conf etc/sluice/mime.types
		usr/share/sluice/html/index.html lib/systemd/system/sluice.service
		etc/logrotate.d/sluice usr/share/man/man8/sluice.8.gz}) {
	ok(-s "$root/$f", "installed $f");
}
ok(-d "$root/etc/sluice/conf.d" && -d "$root/var/log/sluice", 'conf.d and the log directory');
ok(-x "$root/usr/sbin/sluice", 'the binary is executable');
$out = `../scripts/install --binary $d/nothing --destdir $d/other 2>&1`;
isnt($?, 0, 'no binary: the install fails');

# --build, as the Dockerfile runs it (with the dev profile the suite built:
# nothing to compile) when the binary under test is this tree's.
SKIP: {
	skip('SLUICE_BINARY is not this tree\'s target/debug/sluice', 2)
		unless Cwd::abs_path($bin) eq Cwd::abs_path('../target/debug/sluice');
	$out = `../scripts/install --build --profile dev --destdir $d/built 2>&1`;
	is($?, 0, 'scripts/install --build --profile dev exits 0') or diag($out);
	ok(-x "$d/built/usr/sbin/sluice", '... and installs target/debug/sluice');
}

# Every absolute path of the installed files, moved under DESTDIR; the
# workers' user (not created here) is nobody; the listener on loopback.
sub moved {
	my ($text) = @_;
	$text =~ s{(?<![\w/.])(/usr/sbin/|/usr/share/sluice/|/etc/sluice/|/var/log/sluice/|/run/sluice\.pid)}{$root$1}g;
	return $text;
}
mkdir "$root/run";
my $conf = moved($t->read_file("$root/etc/sluice/sluice.conf"));
$conf =~ s/^(\s*)user sluice;/${1}user nobody;/m or fail('user sluice in sluice.conf');
$conf =~ s/^(\s*)listen 80 default_server;/${1}listen 127.0.0.1:$p default_server;/m
	or fail('listen 80 in sluice.conf');
$t->write_file('root/etc/sluice/sluice.conf', $conf);

sub site {
	my ($text) = @_;
	$t->write_file('root/etc/sluice/conf.d/app.conf', "server {\n    listen 127.0.0.1:$p;\n"
		. "    server_name app.test;\n    location / { return 200 \"$text\\n\"; }\n}\n");
}
site('app one');
# The harness checks error.log for alerts.
symlink("$root/var/log/sluice/error.log", "$d/error.log") or die "symlink: $!\n";

# The unit's command lines, as systemd would run them (a leading '-'
# means "failure is ignored"; $MAINPID is the pid file's).
my %unit;
for (split /\n/, $t->read_file("$root/lib/systemd/system/sluice.service")) {
	push @{$unit{$1}}, moved($2) if /^(\w+)=(.*)$/;
}
is_deeply($unit{PIDFile}, ["$root/run/sluice.pid"], 'PIDFile is the configuration\'s pid');
is_deeply($unit{Type}, ['forking'], 'Type=forking');

sub mainpid {
	my $pid = $t->read_file("$root/run/sluice.pid");
	chomp $pid;
	return $pid;
}

sub exec_line {
	my ($line) = @_;
	$line =~ s/^-//;
	my $pid = mainpid();
	$line =~ s/\$MAINPID\b/$pid/g;
	Test::Sluice::_release_ports();
	my $o = `$line 2>&1`;
	return ($? >> 8, $o);
}

my ($rc, $o) = exec_line($unit{ExecStartPre}[0]);
is($rc, 0, 'ExecStartPre (-t -q) passes') or diag($o);
($rc, $o) = exec_line($unit{ExecStart}[0]);
is($rc, 0, 'ExecStart returns 0 once the daemon is up') or diag($o);
my $master = mainpid();
like($master, qr/^\d+$/, 'the daemon wrote the unit\'s PIDFile');
$t->{_master} = $master if $master =~ /^\d+$/;
ok($master && kill(0, $master), 'the master is running');

sub get {
	my ($host, $uri) = @_;
	return http("GET $uri HTTP/1.0\nHost: $host\n\n") // '';
}
like(get('localhost', '/'), qr/^HTTP\/1\.1 200 .*<html/si, 'the installed html/ is served');
like(get('localhost', '/status'), qr/Active connections: \d+/, 'stub_status from this host');
like(get('localhost', '/metrics'), qr/^sluice_process_generation 1$/m, 'metrics from this host');
like(get('app.test', '/'), qr/app one/, 'a site from conf.d/');

# systemctl reload: -t refuses a bad configuration before any HUP (its
# [emerg] goes to the error log too, as nginx's does; with logrotate present
# the log is rotated away before the check, without it the line stays).
$t->expect_errors(qr/unknown directive "nonsense"/);
$t->write_file('root/etc/sluice/conf.d/app.conf', "server { listen 127.0.0.1:$p; nonsense; }\n");
($rc, $o) = exec_line($unit{ExecReload}[0]);
isnt($rc, 0, 'ExecReload: a bad configuration fails -t');
like($o, qr/unknown directive "nonsense" in \S+app\.conf:1/, '... with file:line');
site('app two');
my $rc1 = (exec_line($unit{ExecReload}[0]))[0];
my $rc2 = (exec_line($unit{ExecReload}[1]))[0];
is("$rc1 $rc2", '0 0', 'ExecReload: -t, then HUP');
ok(poll_until(sub { get('app.test', '/') =~ /app two/ }), 'the reload applied the new site');
is(mainpid(), $master, 'same master after the reload');

# sluice(8)'s upgrade under systemd: USR2, WINCH and QUIT to the old master;
# the unit's PIDFile then names the new master, which systemd reads again.
$t->{_master} = $master;
kill 'USR2', $master;
ok(poll_until(sub { my $n = mainpid(); $n =~ /^\d+$/ && $n ne $master
		&& $t->read_file("$root/run/sluice.pid.oldbin") =~ /^$master$/m }),
	'USR2: .oldbin names the old master, the PIDFile a new one');
my $new = mainpid();
is(readlink("/proc/$new/exe"), "$root/usr/sbin/sluice",
	'the new master runs the installed binary');
ok(poll_until(sub { $t->log_count(qr/start worker processes/) >= 3 }), 'the new workers started');
kill 'WINCH', $master;
kill 'QUIT', $master;
ok(poll_until(sub { !kill(0, $master) }), 'WINCH, QUIT: the old master exits');
ok(!-e "$root/run/sluice.pid.oldbin" && mainpid() eq $new, '.oldbin gone, the PIDFile names the new master');
like(get('app.test', '/'), qr/app two/, 'the new master serves');
$master = $new;
$t->{_master} = $master;

# logrotate with the installed file: renamed logs, USR1, new files written.
SKIP: {
	skip('no logrotate', 4) unless -x '/usr/sbin/logrotate';
	get('app.test', '/before-rotate');
	$t->write_file('logrotate.conf', moved($t->read_file("$root/etc/logrotate.d/sluice")));
	chmod 0644, "$d/logrotate.conf";
	$o = `/usr/sbin/logrotate -f -s $d/logrotate.state $d/logrotate.conf 2>&1`;
	is($?, 0, 'logrotate -f exits 0') or diag($o);
	like($t->read_file("$root/var/log/sluice/access.log.1"), qr/before-rotate/,
		'the old access log renamed');
	# Logged to the file being reopened: the renamed one.
	ok($t->waitforlog(qr/reopening logs/, 5, "$root/var/log/sluice/error.log.1"),
		'the master reopened its logs (USR1)');
	get('app.test', '/after-rotate');
	ok(poll_until(sub { $t->read_file("$root/var/log/sluice/access.log") =~ /after-rotate/ }),
		'requests go to the new access log');
}

SKIP: {
	skip('no systemd-analyze', 1) unless -x '/usr/bin/systemd-analyze';
	# The unit as installed, its executables under DESTDIR, its man pages found there.
	$t->write_file('sluice.service', moved($t->read_file("$root/lib/systemd/system/sluice.service")));
	$o = `MANPATH=$root/usr/share/man /usr/bin/systemd-analyze verify $d/sluice.service 2>&1`;
	is($?, 0, 'systemd-analyze verify passes') or diag($o);
}

# systemctl stop: QUIT through start-stop-daemon, which waits for the exit.
($rc, $o) = exec_line($unit{ExecStop}[0]);
is($rc, 0, 'ExecStop exits 0') or diag($o);
ok(!kill(0, $master), 'the master has exited when ExecStop returns');
ok(!-e "$root/run/sluice.pid", 'the pid file is removed');
like($t->read_file('error.log'), qr/\[notice\] \d+#\d+: exit$/m, 'the master exited by itself');
delete $t->{_master};

# The Dockerfile: what it copies from the build stage is what the install
# made, and its command line (ENTRYPOINT and CMD) runs the master in the
# foreground; its STOPSIGNAL stops it with exit code 0.
my $df = $t->read_file(Cwd::abs_path('../Dockerfile'));
my @copied = $df =~ m{^COPY --from=build /out(/\S+)}mg;
ok(@copied >= 3 && !grep({ !-e "$root$_" } @copied), 'the Dockerfile copies what scripts/install made')
	or diag("@copied");
like($df, qr{^RUN scripts/install --build\b}m, 'the build stage runs scripts/install');
my ($ep) = $df =~ /^ENTRYPOINT (\[.*\])$/m;
my ($cmd) = $df =~ /^CMD (\[.*\])$/m;
my ($stop) = $df =~ /^STOPSIGNAL SIG(\w+)$/m;
my @argv = map { moved($_) } map { /"((?:[^"\\]|\\.)*)"/g } ($ep // ''), ($cmd // '');
is_deeply([@argv[-2, -1]], ['-g', 'daemon off;'], 'CMD: daemon off;');
Test::Sluice::_release_ports();
my $fg = fork() // die "fork: $!\n";
if ($fg == 0) {
	open STDOUT, '>', '/dev/null';
	open STDERR, '>>', "$d/docker-stderr.log";
	exec(@argv) or POSIX::_exit(127);
}
$t->{_master} = $fg;
$t->{_child} = $fg;
ok(poll_until(sub { mainpid() eq $fg }), 'the process the container starts is the master (foreground)');
like(get('localhost', '/'), qr/^HTTP\/1\.1 200 /, 'it serves');
kill $stop // 'TERM', $fg;
my $gone = poll_until(sub { waitpid($fg, POSIX::WNOHANG()) == $fg });
ok($gone && $? == 0, "STOPSIGNAL $stop: exit code 0") or diag("status $?");
delete $t->{_master};
