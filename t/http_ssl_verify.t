#!/usr/bin/perl

# Client certificates (mutual TLS): ssl_verify_client on, optional and
# optional_no_ca, ssl_client_certificate (named in the CertificateRequest)
# and ssl_trusted_certificate (not named), ssl_verify_depth, the
# $ssl_client_* variables, nginx's 400 pages (495, 496) and error_page for
# them. Keys and certificates are made with the openssl command.

use warnings;
use strict;

use Test::More;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;
use Test::Sluice::Ssl qw/need_openssl need_ssl_client openssl_in read_to_end/;

need_ssl_client();

my $t = Test::Sluice->new()->has(qw/http/)->plan(27);
my $d = $t->testdir();

sub openssl { openssl_in($d, @_) }

my $ec = '-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes';
$t->write_file('ca.ext', "basicConstraints=critical,CA:true\nkeyUsage=critical,keyCertSign,cRLSign\n");
$t->write_file('ee.ext', "basicConstraints=CA:false\nextendedKeyUsage=clientAuth\n");

# A certificate $name for $subj signed by $ca (a CA when $ext is ca.ext).
sub issue {
	my ($name, $subj, $ca, $serial, $ext) = @_;
	openssl("req -new $ec -keyout $name.key -out $name.csr -subj '$subj'");
	openssl("x509 -req -in $name.csr -CA $ca.crt -CAkey $ca.key -set_serial $serial"
		. " -days 3 -out $name.crt -extfile " . ($ext // 'ee.ext'));
}

openssl("req -x509 $ec -keyout server.key -out server.crt -days 3 -subj /CN=server");
openssl("req -x509 $ec -keyout root.key -out root.crt -days 3 -subj /CN=root");
openssl("req -x509 $ec -keyout other.key -out other.crt -days 3 -subj /CN=other");
issue('int', '/CN=int', 'root', 2, 'ca.ext');
issue('client', '/C=US/O=Org, Inc/CN=client', 'root', '0xABCDEF');
issue('end', '/CN=end', 'int', 5);
issue('stranger', '/CN=stranger', 'other', 6);
system("cat $d/end.crt $d/int.crt > $d/end-chain.crt") == 0 or die;
openssl("req -new $ec -keyout self.key -out self.csr -subj /CN=self");
openssl("x509 -req -in self.csr -signkey self.key -days 3 -out self.crt -extfile ee.ext");

$t->write_file_expand('sluice.conf', <<'EOF');

%%TEST_GLOBALS%%

events {
}

http {
    access_log off;

    ssl_certificate     server.crt;
    ssl_certificate_key server.key;

    server {
        listen 127.0.0.1:%%PORT_8443%% ssl;
        ssl_verify_client on;
        ssl_client_certificate root.crt;
        ssl_trusted_certificate int.crt;
        location / {
            return 200 "$ssl_client_verify|$ssl_client_s_dn|$ssl_client_i_dn|$ssl_client_serial|$ssl_client_fingerprint";
        }
        location /cert { return 200 "$ssl_client_escaped_cert"; }
    }

    server {
        listen 127.0.0.1:%%PORT_8444%% ssl;
        ssl_verify_client optional;
        ssl_client_certificate root.crt;
        location / { return 200 "optional $ssl_client_verify|$ssl_client_s_dn"; }
    }

    server {
        listen 127.0.0.1:%%PORT_8445%% ssl;
        ssl_verify_client optional_no_ca;
        location / { return 200 "no_ca $ssl_client_verify|$ssl_client_s_dn"; }
    }

    server {
        listen 127.0.0.1:%%PORT_8446%% ssl;
        ssl_verify_client on;
        ssl_verify_depth 2;
        ssl_client_certificate root.crt;
        ssl_trusted_certificate int.crt;
        location / { return 200 "depth2 $ssl_client_verify|$ssl_client_s_dn"; }
    }

    server {
        listen 127.0.0.1:%%PORT_8447%% ssl;
        ssl_verify_client on;
        ssl_client_certificate root.crt;
        error_page 495 /e495;
        error_page 496 /e496;
        location / { return 200 "ok"; }
        location = /e495 { return 403 "bad cert: $ssl_client_verify"; }
        location = /e496 { return 403 "no cert"; }
    }
}

EOF

$t->run();

# GET $uri over TLS with client certificate $cert (none when undef).
sub get {
	my ($port, $cert, %o) = @_;
	my $s = IO::Socket::SSL->new(
		PeerAddr => '127.0.0.1:' . port($port),
		SSL_verify_mode => 0,
		SSL_hostname => '',
		$o{version} ? (SSL_version => $o{version}) : (),
		defined $cert ? (SSL_cert_file => "$d/$cert.crt",
			SSL_key_file => "$d/" . ($o{key} // $cert) . '.key') : (),
		Timeout => 5,
	) or return "no connection: " . IO::Socket::SSL::errstr();
	my $v = $o{v11} ? '1.1' : '1.0';
	$s->syswrite("GET " . ($o{uri} // '/') . " HTTP/$v\r\nHost: localhost\r\n\r\n");
	my $r = read_to_end($s, 8);
	return $r;
}

sub body { my ($r) = @_; return $r =~ /\r\n\r\n(.*)$/s ? $1 : '' }

# on: no certificate, a good one, one from an unknown CA.

my $r = get(8443, undef, v11 => 1);
like($r, qr{^HTTP/1.1 400 .*No required SSL certificate was sent}s, 'on: no certificate: 400');
like($r, qr{^Connection: close\r$}m, 'on: the connection closes');
ok($t->waitforlog(qr/\[info\] .*client sent no required SSL certificate while reading client request headers/),
	'no certificate logged');

my $fp = lc(`openssl x509 -in $d/client.crt -noout -fingerprint -sha1`);
$fp =~ s/^.*=//; $fp =~ s/[:\s]//g;
$r = get(8443, 'client');
like($r, qr{^HTTP/1.1 200 }, 'on: good certificate: 200');
is(body($r), "SUCCESS|CN=client,O=Org\\, Inc,C=US|CN=root|ABCDEF|$fp", 'on: the variables');
$r = get(8443, 'client', version => 'TLSv1_2');
is(body($r), "SUCCESS|CN=client,O=Org\\, Inc,C=US|CN=root|ABCDEF|$fp", 'on: TLSv1.2 too');

my $pem = $t->read_file('client.crt');
(my $escaped = $pem) =~ s/([^A-Za-z0-9\-._~])/sprintf('%%%02X', ord($1))/ge;
is(body(get(8443, 'client', uri => '/cert')), $escaped, '$ssl_client_escaped_cert');

$r = get(8443, 'stranger');
like($r, qr{^HTTP/1.1 400 .*The SSL certificate error}s, 'on: unknown CA: 400');
ok($t->waitforlog(qr/\[info\] .*client SSL certificate verify error: \(20:unable to get local issuer certificate\) while reading client request headers/),
	'verify error logged');
like(get(8443, 'self'), qr{^HTTP/1.1 400 .*The SSL certificate error}s, 'on: self-signed: 400');

# A certificate with a key that is not its own: the handshake fails.

unlike(get(8443, 'client', key => 'stranger'), qr{^HTTP/1.1 200}, 'wrong key: refused');

# The CertificateRequest names ssl_client_certificate's CAs only.

my $sc = `openssl s_client -connect 127.0.0.1:@{[port(8443)]} </dev/null 2>&1`;
like($sc, qr/Acceptable client certificate CA names\n(?:.*\n)*?CN ?= ?root\n/,
	'ssl_client_certificate named in the request');
unlike($sc, qr/^CN ?= ?int$/m, 'ssl_trusted_certificate not named');

# ssl_verify_depth: 1 (the default) takes a certificate a root signed;
# one below an intermediate needs 2.

like(get(8443, 'end-chain', key => 'end'), qr{^HTTP/1.1 400 .*The SSL certificate error}s,
	'depth 1: a chain of two signatures fails');
ok($t->waitforlog(qr/verify error: \(22:certificate chain too long\)/), 'chain too long logged');
is(body(get(8446, 'end-chain', key => 'end')), 'depth2 SUCCESS|CN=end', 'depth 2: succeeds');

# optional: none is fine, a bad one is not.

is(body(get(8444)), 'optional NONE|', 'optional: no certificate');
is(body(get(8444, 'client')), 'optional SUCCESS|CN=client,O=Org\\, Inc,C=US', 'optional: good');
like(get(8444, 'stranger'), qr{^HTTP/1.1 400 .*The SSL certificate error}s, 'optional: unknown CA: 400');

# optional_no_ca: an unknown issuer is let through, its failure told.

is(body(get(8445)), 'no_ca NONE|', 'optional_no_ca: no certificate');
is(body(get(8445, 'stranger')), 'no_ca FAILED:unable to get local issuer certificate|CN=stranger',
	'optional_no_ca: unknown CA let through');
is(body(get(8445, 'self')), 'no_ca FAILED:self-signed certificate|CN=self',
	'optional_no_ca: self-signed let through');

# error_page 495 and 496.

$r = get(8447);
like($r, qr{^HTTP/1.1 496 }, 'error_page 496: the status stays, as nginx\'s');
is(body($r), 'no cert', 'error_page 496');
is(body(get(8447, 'stranger')), 'bad cert: FAILED:unable to get local issuer certificate', 'error_page 495');
is(body(get(8447, 'client')), 'ok', 'good certificate passes');

# Configuration errors.

$t->write_file('bad.conf', <<"EOF");
events {}
http {
    server {
        listen 127.0.0.1:@{[port(8448)]} ssl;
        ssl_certificate $d/server.crt;
        ssl_certificate_key $d/server.key;
        ssl_verify_client on;
    }
}
EOF
my $out = `@{[Test::Sluice->binary()]} -t -p $d/ -c $d/bad.conf 2>&1`;
like($out, qr/\[emerg\] no ssl_client_certificate or ssl_trusted_certificate for ssl_verify_client in .*bad\.conf:7/,
	'verify without CAs: emerg with file:line');
