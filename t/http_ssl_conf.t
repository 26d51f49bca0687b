#!/usr/bin/perl

# The ssl directives as -t checks them: certificates and keys read and
# matched (a missing file, a bad key, a key of another certificate, a
# certificate without its key are [emerg] with file:line), an expired
# certificate a [warn], cipher names rustls has no suite for, listen ...
# ssl without a certificate, and TLS where it is not there yet (stream).

use warnings;
use strict;

use Test::More;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;
use Test::Sluice::Ssl qw/need_openssl need_ssl_client openssl_in/;

need_openssl();

my $t = Test::Sluice->new()->has(qw/http/)->plan(14);
my $d = $t->testdir();

sub openssl { openssl_in($d, @_) }

openssl("req -x509 -newkey rsa:2048 -nodes -keyout rsa.key -out rsa.crt -days 3 -subj /CN=rsa.example");
openssl("req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout ec.key -out ec.crt -days 3 -subj /CN=ec.example");

# An expired certificate: openssl ca can set its dates.
mkdir("$d/ca");
$t->write_file('ca/index.txt', '');
$t->write_file('ca/serial', "01\n");
$t->write_file('ca.cnf', <<'EOF');
[ca]
default_ca = d
[d]
dir = ca
database = ca/index.txt
new_certs_dir = ca
serial = ca/serial
default_md = sha256
policy = p
x509_extensions = ext
[ext]
basicConstraints = CA:FALSE
[p]
commonName = supplied
[req]
distinguished_name = dn
prompt = no
[dn]
CN = old.example
EOF
openssl("req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout old.key -out old.csr -config ca.cnf");
openssl("ca -batch -notext -config ca.cnf -selfsign -keyfile old.key -in old.csr -out old.crt -startdate 20200101000000Z -enddate 20200201000000Z");

$t->write_file('bad.key', "-----BEGIN PRIVATE KEY-----\nbm90IGEga2V5\n-----END PRIVATE KEY-----\n");

# Runs -t on a server block with $body at line 4; (exit code, stderr).
sub check {
	my ($body, $outside) = @_;
	$t->write_file('t.conf', "events { }\nhttp {\nserver {\n$body\n}\n}\n" . ($outside // ''));
	my ($rc, undef, $err) = $t->run_binary('-p', "$d/", '-c', 't.conf', '-e', 'stderr', '-t');
	return ($rc, $err);
}

my $listen = 'listen 127.0.0.1:' . port(8443) . ' ssl;';

my ($rc, $err) = check("$listen ssl_certificate rsa.crt; ssl_certificate_key rsa.key;"
	. " ssl_certificate ec.crt; ssl_certificate_key ec.key;");
is($rc, 0, 'RSA and ECDSA pairs: test is successful');

($rc, $err) = check("$listen ssl_certificate nope.crt; ssl_certificate_key rsa.key;");
like($err, qr!\[emerg\] \d+#0: cannot load certificate "\Q$d\E/nope\.crt": open\(\) failed \(2: No such file or directory\) in \Q$d\E/t\.conf:4!,
	'missing certificate file');
is($rc, 1, 'test failed');

($rc, $err) = check("$listen ssl_certificate rsa.crt; ssl_certificate_key bad.key;");
like($err, qr!\[emerg\] \d+#0: cannot load certificate key "\Q$d\E/bad\.key": .* in \Q$d\E/t\.conf:4!,
	'bad key');

($rc, $err) = check("$listen ssl_certificate rsa.crt; ssl_certificate_key ec.key;");
like($err, qr!\[emerg\] \d+#0: SSL_CTX_use_PrivateKey\("\Q$d\E/ec\.key"\) failed \(key values mismatch.* in \Q$d\E/t\.conf:4!,
	'key of another certificate');

($rc, $err) = check("$listen ssl_certificate rsa.crt;");
like($err, qr!\[emerg\] \d+#0: no "ssl_certificate_key" is defined for certificate "\Q$d\E/rsa\.crt" in \Q$d\E/t\.conf:4!,
	'certificate without its key');

($rc, $err) = check($listen);
like($err, qr!\[emerg\] \d+#0: no "ssl_certificate" is defined for the "listen \.\.\. ssl" directive in \Q$d\E/t\.conf:4!,
	'listen ssl without certificate');

($rc, $err) = check("$listen ssl_certificate old.crt; ssl_certificate_key old.key;");
like($err, qr!\[warn\] \d+#0: certificate "\Q$d\E/old\.crt" has expired in \Q$d\E/t\.conf:4!,
	'expired certificate warned');
is($rc, 0, 'expired certificate: test is successful');

($rc, $err) = check("ssl_ciphers ECDHE-RSA-AES128-GCM-SHA256:DHE-RSA-AES128-GCM-SHA256;");
like($err, qr!\[emerg\] \d+#0: cipher "DHE-RSA-AES128-GCM-SHA256" in "ssl_ciphers" has no rustls suite in \Q$d\E/t\.conf:4!,
	'cipher with no rustls suite');

($rc, $err) = check("ssl_protocols TLSv1 TLSv1.1 TLSv1.2 TLSv1.3;");
like($err, qr!\[warn\] \d+#0: TLSv1 is not supported .* in \Q$d\E/t\.conf:4!, 'TLSv1 warned');

($rc, $err) = check('', "stream {\nserver {\nlisten 127.0.0.1:" . port(8444) . " ssl;\nreturn x;\n}\n}\n");
like($err, qr!\[emerg\] \d+#0: no "ssl_certificate" is defined for the "listen ... ssl" directive in \Q$d\E/t\.conf:9!,
	'stream listen ssl without certificate');

# -V says the module is there, as nginx's does.

(undef, undef, $err) = $t->run_binary('-V');
like($err, qr/^configure arguments: .*--with-http_ssl_module(?:\s|$)/m, '-V lists the ssl module');
like($err, qr/^TLS SNI support enabled$/m, '-V says SNI');
