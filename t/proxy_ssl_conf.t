#!/usr/bin/perl

# The proxy_ssl_* directives as -t checks them: the trusted certificates and
# the client certificate with its key are read when the configuration is
# loaded (a missing or bad file, a key of another certificate, a certificate
# without its key are [emerg] with file:line), proxy_ssl_verify needs
# proxy_ssl_trusted_certificate, protocols and ciphers as ssl_* takes them.

use warnings;
use strict;

use Test::More;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;
use Test::Sluice::Ssl qw/need_openssl need_ssl_client openssl_in/;

need_openssl();

my $t = Test::Sluice->new()->has(qw/http/)->plan(10);
my $d = $t->testdir();

sub openssl { openssl_in($d, @_) }

openssl("req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout a.key -out a.crt -days 3 -subj /CN=a");
openssl("req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout b.key -out b.crt -days 3 -subj /CN=b");
$t->write_file('junk.crt', "not a certificate\n");

# Runs -t on a location proxying over https with $body at line 5; (exit
# code, stderr).
sub check {
	my ($body) = @_;
	$t->write_file('t.conf', "events { }\nhttp {\nserver {\n"
		. "location / { proxy_pass https://127.0.0.1:" . port(8443) . ";\n$body\n}\n}\n}\n");
	my ($rc, undef, $err) = $t->run_binary('-p', "$d/", '-c', 't.conf', '-e', 'stderr', '-t');
	return ($rc, $err);
}

my ($rc, $err) = check("proxy_ssl_verify on; proxy_ssl_trusted_certificate a.crt;\n"
	. "proxy_ssl_certificate b.crt; proxy_ssl_certificate_key b.key; proxy_ssl_server_name on;\n"
	. "proxy_ssl_name \$host; proxy_ssl_verify_depth 2; proxy_ssl_protocols TLSv1.3;\n"
	. "proxy_ssl_ciphers HIGH; proxy_ssl_session_reuse off;");
is($rc, 0, 'every directive: test is successful');

($rc, $err) = check("proxy_ssl_trusted_certificate nope.crt;");
like($err, qr!\[emerg\] \d+#0: cannot load certificate "\Q$d\E/nope\.crt": open\(\) failed \(2: No such file or directory\) in \Q$d\E/t\.conf:5!,
	'missing trusted certificate file');
is($rc, 1, 'test failed');

($rc, $err) = check("proxy_ssl_trusted_certificate junk.crt;");
like($err, qr!\[emerg\] \d+#0: cannot load certificate "\Q$d\E/junk\.crt": no certificate in the file in \Q$d\E/t\.conf:5!,
	'no certificate in the trusted file');

($rc, $err) = check("proxy_ssl_certificate a.crt;\nproxy_ssl_certificate_key b.key;");
like($err, qr!\[emerg\] \d+#0: SSL_CTX_use_PrivateKey\("\Q$d\E/b\.key"\) failed \(key values mismatch.* in \Q$d\E/t\.conf:5!,
	'client key of another certificate');

($rc, $err) = check("proxy_ssl_certificate_key a.key;\nproxy_ssl_certificate nope.crt;");
like($err, qr!\[emerg\] \d+#0: cannot load certificate "\Q$d\E/nope\.crt": open\(\) failed .* in \Q$d\E/t\.conf:6!,
	'missing client certificate');

($rc, $err) = check("proxy_ssl_certificate a.crt;");
like($err, qr!\[emerg\] \d+#0: no "proxy_ssl_certificate_key" is defined for certificate "\Q$d\E/a\.crt" in \Q$d\E/t\.conf:5!,
	'client certificate without its key');

($rc, $err) = check("proxy_ssl_verify on;");
like($err, qr!\[emerg\] \d+#0: no proxy_ssl_trusted_certificate for proxy_ssl_verify in \Q$d\E/t\.conf:4!,
	'verify without trusted certificates');

($rc, $err) = check("proxy_ssl_protocols TLSv1.1;");
like($err, qr!\[emerg\] \d+#0: no protocol in "proxy_ssl_protocols" is supported: use TLSv1\.2 or TLSv1\.3 in \Q$d\E/t\.conf:5!,
	'no usable protocol');

($rc, $err) = check("proxy_ssl_ciphers ECDHE-RSA-AES128-GCM-SHA256:DHE-RSA-AES128-GCM-SHA256;");
like($err, qr!\[emerg\] \d+#0: cipher "DHE-RSA-AES128-GCM-SHA256" in "proxy_ssl_ciphers" has no rustls suite in \Q$d\E/t\.conf:5!,
	'cipher with no rustls suite');
