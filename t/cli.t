#!/usr/bin/perl

# Command line as nginx's: -v, -V, -h, -t, -T, -q, -g, -s, bad options.

use warnings;
use strict;

use Test::More;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice;

my $t = Test::Sluice->new()->has(qw/http/)->plan(34);
my $d = $t->testdir();

my ($rc, $out, $err) = $t->run_binary('-v');
is($rc, 0, '-v exit code');
like($err, qr!^sluice version: sluice/[\d.]+\nnginx version: nginx/1\.31\.5 \(behaviour followed\)\n$!,
	'-v text');

($rc, $out, $err) = $t->run_binary('-V');
like($err, qr/^configure arguments: .*--without-http_uwsgi_module/m, '-V lists missing modules');
unlike($err, qr/--without-http_proxy_module/, '-V: the proxy module is built in');
unlike($err, qr/--without-http_grpc_module/, '-V: the grpc module is built in');
like($err, qr/^configure arguments: .*--with-http_v2_module(?:\s|$)/m, '-V: HTTP/2');
like($err, qr/^core directives not implemented: (?=.*\bssl_engine\b)(?!.*\btry_files\b).*$/m,
	'-V lists the core directives not implemented');
like($err, qr/--with-stream(?:\s|$)/m, '-V lists the stream module');

($rc, $out, $err) = $t->run_binary('-h');
is($rc, 0, '-h exit code');
like($err, qr/Usage: sluice \[-\?hvVtTq\] \[-s signal\] \[-p prefix\]\n\s+\[-e filename\] \[-c filename\] \[-g directives\]/,
	'-h usage');

($rc, $out, $err) = $t->run_binary('-x');
is($rc, 1, 'bad option exit code');
like($err, qr/invalid option: "x"/, 'bad option message');

($rc, $out, $err) = $t->run_binary('-c');
like($err, qr/option "-c" requires file name/, '-c without file');

# A good config with an include, tested and dumped.

$t->write_file('inc.conf', "# included\nworker_processes 1;\n");
$t->write_file('good.conf', <<'EOF');
include inc.conf;
events { }
http { server { listen 127.0.0.1:1; location / { return 200 ok; } } }
EOF

($rc, $out, $err) = $t->run_binary('-p', "$d/", '-c', 'good.conf', '-e', 'stderr', '-t');
is($rc, 0, '-t ok exit code');
like($err, qr!sluice: the configuration file \Q$d\E/good\.conf syntax is ok\nsluice: configuration file \Q$d\E/good\.conf test is successful!,
	'-t ok text');

($rc, $out, $err) = $t->run_binary('-p', "$d/", '-c', 'good.conf', '-e', 'stderr', '-tq');
is($err, '', '-q is quiet');

($rc, $out, $err) = $t->run_binary('-p', "$d/", '-c', 'good.conf', '-e', 'stderr', '-T');
is($rc, 0, '-T exit code');
like($out, qr!^# configuration file \Q$d\E/good\.conf:\ninclude inc\.conf;.*\n\n# configuration file \Q$d\E/inc\.conf:\n# included\nworker_processes 1;\n\n$!s,
	'-T dumps files in order');

# include with a glob: files in name order; a glob matching nothing is fine.

mkdir("$d/conf.d");
$t->write_file('conf.d/b.conf', "worker_shutdown_timeout 1s;\n");
$t->write_file('conf.d/a.conf', "worker_rlimit_nofile 100;\n");
$t->write_file('glob.conf', "include conf.d/*.conf;\ninclude none.d/*.conf;\nevents { }\n");
($rc, $out, $err) = $t->run_binary('-p', "$d/", '-c', 'glob.conf', '-e', 'stderr', '-T');
like($out, qr!conf\.d/a\.conf:\nworker_rlimit_nofile.*conf\.d/b\.conf:!s, 'include glob in order');

# As root, an unknown user fails the test.

$t->write_file('user.conf', "user no-such-user-here;\nevents { }\n");
($rc, $out, $err) = $t->run_binary('-p', "$d/", '-c', 'user.conf', '-e', 'stderr', '-t');
SKIP: {
	skip 'not root', 1 unless $> == 0;
	like($err, qr/getpwnam\("no-such-user-here"\) failed.*test failed/s, '-t checks the user');
}

# An unknown directive at line 7 of an included file.

$t->write_file('bad.inc', "\n\n\n\n\n\nfoo bar;\n");
$t->write_file('bad.conf', "events { }\ninclude bad.inc;\n");

($rc, $out, $err) = $t->run_binary('-p', "$d/", '-c', 'bad.conf', '-e', 'stderr', '-t');
is($rc, 1, '-t failure exit code');
like($err, qr!\[emerg\] .*unknown directive "foo" in \Q$d\E/bad\.inc:7!, 'file and line of included file');
like($err, qr!sluice: configuration file \Q$d\E/bad\.conf test failed!, '-t failure text');

# The error also goes to the -e log.

($rc, $out, $err) = $t->run_binary('-p', "$d/", '-c', 'bad.conf', '-e', 'start.log', '-t');
like($t->read_file('start.log'), qr!\[emerg\] \d+#0: unknown directive "foo" in \Q$d\E/bad\.inc:7!,
	'error in -e log');
like($err, qr!^sluice: \[emerg\] unknown directive "foo" in !m, 'error on stderr too');

# -g: directives from the command line, duplicates with the file refused.

($rc, $out, $err) = $t->run_binary('-p', "$d/", '-c', 'good.conf', '-e', 'stderr', '-t',
	'-g', 'pid x.pid;');
is($rc, 0, '-g accepted');
$t->write_file('pid.conf', "events { }\n\npid y.pid;\n");
($rc, $out, $err) = $t->run_binary('-p', "$d/", '-c', 'pid.conf', '-e', 'stderr', '-t',
	'-g', 'pid x.pid;');
like($err, qr!"pid" directive is duplicate in \Q$d\E/pid\.conf:3!, '-g duplicate');
($rc, $out, $err) = $t->run_binary('-p', "$d/", '-c', 'good.conf', '-e', 'stderr', '-t',
	'-g', 'bogus on;');
like($err, qr!unknown directive "bogus" in command line!, '-g error says command line');

# Syntax errors.

$t->write_file('eof.conf', "events { }\n\nhttp {\n");
($rc, $out, $err) = $t->run_binary('-p', "$d/", '-c', 'eof.conf', '-e', 'stderr', '-t');
like($err, qr!unexpected end of file, expecting "\}" in \Q$d\E/eof\.conf:3!, 'unexpected eof');

$t->write_file('noevents.conf', "worker_processes 1;\n");
($rc, $out, $err) = $t->run_binary('-p', "$d/", '-c', 'noevents.conf', '-e', 'stderr', '-t');
like($err, qr!no "events" section in configuration!, 'no events');

# -s with no running master.

($rc, $out, $err) = $t->run_binary('-p', "$d/", '-c', 'good.conf', '-e', 'stderr', '-s', 'reload',
	'-g', "pid $d/none.pid;");
is($rc, 1, '-s without pid file fails');
like($err, qr!open\(\) "\Q$d\E/none\.pid" failed \(2: No such file or directory\)!, '-s error');

# The shipped sample configuration passes -t as it is (copied here, so that
# the log files -t creates stay in the test directory).
mkdir("$d/sample");
mkdir("$d/sample/conf");
mkdir("$d/sample/logs");
for my $f (qw/sluice.conf mime.types/) {
	$t->write_file("sample/conf/$f", $t->read_file("$FindBin::Bin/../conf/$f"));
}
($rc, $out, $err) = $t->run_binary('-p', "$d/sample/", '-c', 'conf/sluice.conf', '-e', 'stderr', '-t');
is($rc, 0, 'conf/sluice.conf passes -t') or diag($err);

($rc, $out, $err) = $t->run_binary('-s', 'bogus');
like($err, qr/invalid option: "-s bogus"/, '-s bad signal');
