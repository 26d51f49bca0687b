#!/usr/bin/perl

# The ssl directives sluice accepts without effect or refuses, as -t
# reports them: ssl_dhparam is read (a missing file is an [emerg], as in
# nginx) and warned about (rustls offers no DHE suites); ssl_conf_command,
# ssl_password_file, proxy_ssl_password_file, proxy_ssl_conf_command and
# ssl_early_data are an [emerg] saying why, with file and line.

use warnings;
use strict;

use Test::More;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;

my $t = Test::Sluice->new()->has(qw/http stream/)->plan(10);
my $d = $t->testdir();

$t->write_file('dh.pem', "-----BEGIN DH PARAMETERS-----\n-----END DH PARAMETERS-----\n");

# -t on $body at line 4 of a server block (of $ctx: http or stream); (rc, stderr).
sub check {
	my ($body, $ctx) = @_;
	$ctx //= 'http';
	$t->write_file('t.conf', "events { }\n$ctx {\nserver {\n$body\n}\n}\n");
	my ($rc, undef, $err) = $t->run_binary('-p', "$d/", '-c', 't.conf', '-e', 'stderr', '-t');
	return ($rc, $err);
}

my ($rc, $err) = check('ssl_dhparam dh.pem;');
like($err, qr!\[warn\] .*"ssl_dhparam" has no effect: rustls offers no DHE cipher suites in \Q$d\E/t\.conf:4!,
	'ssl_dhparam: warned');
is($rc, 0, 'ssl_dhparam: accepted');
($rc, $err) = check('ssl_dhparam nope.pem;', 'stream');
like($err, qr!\[emerg\] .*PEM_read_bio_DHparams\("\Q$d\E/nope\.pem"\) failed \(open\(\) failed \(2: No such file or directory\)\) in \Q$d\E/t\.conf:4!,
	'ssl_dhparam: a missing file (stream)');
is($rc, 1, 'ssl_dhparam: missing file fails');

like((check('ssl_conf_command Options PrioritizeChaCha;'))[1],
	qr!\[emerg\] .*"ssl_conf_command" is not supported: OpenSSL configuration commands have no meaning for rustls in \Q$d\E/t\.conf:4!,
	'ssl_conf_command');
like((check('ssl_password_file pw;'))[1],
	qr!\[emerg\] .*"ssl_password_file" is not supported: encrypted keys are not supported.* in \Q$d\E/t\.conf:4!,
	'ssl_password_file');
like((check('ssl_password_file pw;', 'stream'))[1],
	qr!\[emerg\] .*"ssl_password_file" is not supported: encrypted keys!, 'ssl_password_file in stream');
like((check('location / { proxy_ssl_password_file pw; }'))[1],
	qr!\[emerg\] .*"proxy_ssl_password_file" is not supported: encrypted keys.* in \Q$d\E/t\.conf:4!,
	'proxy_ssl_password_file');
like((check('proxy_ssl_conf_command Options PrioritizeChaCha;'))[1],
	qr!\[emerg\] .*"proxy_ssl_conf_command" is not supported: OpenSSL.* in \Q$d\E/t\.conf:4!,
	'proxy_ssl_conf_command');
like((check('ssl_early_data on;'))[1],
	qr!\[emerg\] .*"ssl_early_data" is not supported: 0-RTT \(TLS 1\.3 early data\) is not offered in \Q$d\E/t\.conf:4!,
	'ssl_early_data');
