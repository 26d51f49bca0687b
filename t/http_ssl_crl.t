#!/usr/bin/perl

# ssl_crl (a client certificate the CRL lists is refused: $ssl_client_verify
# says "certificate revoked"; one it does not list verifies) and
# proxy_ssl_crl (an upstream whose certificate is revoked fails the
# handshake: 502, where the same upstream without the CRL is fine), with
# -t's [emerg] for a CRL file that cannot be read. The CA, certificates
# and CRL are made with the openssl command (openssl ca).

use warnings;
use strict;

use Test::More;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;
use Test::Sluice::Ssl qw/need_openssl openssl_in/;

need_openssl();
`curl --version 2>&1` =~ /^curl/ or plan(skip_all => 'no curl');

my $t = Test::Sluice->new()->has(qw/http/)->plan(8);
my $d = $t->testdir();

sub openssl { openssl_in($d, @_) }

my $ec = '-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes';
mkdir("$d/db");
$t->write_file('db/index.txt', '');
$t->write_file('db/crlnumber', "01\n");
$t->write_file('ca.cnf', <<'EOF');
[ca]
default_ca = d
[d]
database = db/index.txt
crlnumber = db/crlnumber
default_md = sha256
default_crl_days = 2
EOF
$t->write_file('ca.ext', "basicConstraints=critical,CA:true\nkeyUsage=critical,keyCertSign,cRLSign\n");
$t->write_file('client.ext', "basicConstraints=CA:false\nextendedKeyUsage=clientAuth\n");
$t->write_file('server.ext', "basicConstraints=CA:false\nextendedKeyUsage=serverAuth\nsubjectAltName=DNS:up.example\n");

openssl("req -x509 $ec -keyout root.key -out root.crt -days 3 -subj /CN=root -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign");
openssl("req -x509 $ec -keyout server.key -out server.crt -days 3 -subj /CN=server");

sub issue {
	my ($name, $serial, $ext) = @_;
	openssl("req -new $ec -keyout $name.key -out $name.csr -subj /CN=$name");
	openssl("x509 -req -in $name.csr -CA root.crt -CAkey root.key -set_serial $serial"
		. " -days 3 -out $name.crt -extfile $ext");
}
issue('good', 11, 'client.ext');
issue('revoked', 12, 'client.ext');
issue('up', 13, 'server.ext');
issue('upbad', 14, 'server.ext');
openssl('ca -config ca.cnf -keyfile root.key -cert root.crt -revoke revoked.crt');
openssl('ca -config ca.cnf -keyfile root.key -cert root.crt -revoke upbad.crt');
openssl('ca -config ca.cnf -keyfile root.key -cert root.crt -gencrl -out root.crl');

$t->write_file_expand('sluice.conf', <<'EOF');

%%TEST_GLOBALS%%

events {
}

http {
    access_log off;

    server {
        listen 127.0.0.1:%%PORT_8443%% ssl;
        ssl_certificate server.crt;
        ssl_certificate_key server.key;
        ssl_verify_client optional;
        ssl_client_certificate root.crt;
        ssl_crl root.crl;
        location / { return 200 "verify $ssl_client_verify"; }
    }

    server {
        listen 127.0.0.1:%%PORT_8444%% ssl;
        ssl_certificate up.crt;
        ssl_certificate_key up.key;
        location / { return 200 "upstream"; }
    }

    server {
        listen 127.0.0.1:%%PORT_8445%% ssl;
        ssl_certificate upbad.crt;
        ssl_certificate_key upbad.key;
        location / { return 200 "upstream"; }
    }

    server {
        listen 127.0.0.1:%%PORT_8080%%;
        proxy_ssl_verify on;
        proxy_ssl_trusted_certificate root.crt;
        proxy_ssl_name up.example;
        proxy_next_upstream off;

        location /good { proxy_pass https://127.0.0.1:%%PORT_8444%%; proxy_ssl_crl root.crl; }
        location /bad { proxy_pass https://127.0.0.1:%%PORT_8445%%; proxy_ssl_crl root.crl; }
        location /nocrl { proxy_pass https://127.0.0.1:%%PORT_8445%%; }
    }
}

EOF

$t->run();

sub curl {
	my ($url, $cert) = @_;
	my $c = $cert ? "--cert $d/$cert.crt --key $d/$cert.key" : '';
	return `curl -sk -m 10 $c -w ' %{http_code}' $url 2>&1`;
}

my $p = port(8443);
like(curl("https://127.0.0.1:$p/", 'good'), qr/verify SUCCESS 200/, 'ssl_crl: a certificate not listed verifies');
like(curl("https://127.0.0.1:$p/", 'revoked'), qr/The SSL certificate error.* 400$/s,
	'ssl_crl: a revoked certificate fails');
ok($t->waitforlog(qr/client SSL certificate verify error: \(23:certificate revoked\)/),
	'ssl_crl: why, in the log');

$p = port(8080);
like(curl("http://127.0.0.1:$p/good"), qr/^upstream 200$/, 'proxy_ssl_crl: upstream not revoked');
like(curl("http://127.0.0.1:$p/bad"), qr/ 502$/, 'proxy_ssl_crl: revoked upstream refused');
like(curl("http://127.0.0.1:$p/nocrl"), qr/^upstream 200$/, 'the same upstream without the CRL');
ok($t->waitforlog(qr/upstream SSL certificate verify error: \(23:certificate revoked\)/),
	'the reason in the log');

$t->write_file('t.conf', "events { }\nhttp {\nserver {\nssl_crl nope.crl;\n}\n}\n");
my (undef, undef, $err) = $t->run_binary('-p', "$d/", '-c', 't.conf', '-e', 'stderr', '-t');
like($err, qr!\[emerg\] .*X509_LOOKUP_load_file\("\Q$d\E/nope\.crl"\) failed \(open\(\) failed \(2: No such file or directory\)\) in \Q$d\E/t\.conf:4!,
	'unreadable CRL');
