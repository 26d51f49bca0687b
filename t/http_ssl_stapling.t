#!/usr/bin/perl

# ssl_stapling with ssl_stapling_file: the DER OCSP response in the file is
# stapled (openssl s_client -status sees it, in TLS 1.3 and 1.2); without
# the file stapling is off with a [warn] (sluice queries no OCSP
# responder); ssl_stapling_verify is accepted; a file that is no OCSP
# response is an [emerg]. The response is made with openssl ocsp.

use warnings;
use strict;

use Test::More;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;
use Test::Sluice::Ssl qw/need_openssl openssl_in ec_ca_in ec_signed_in/;

need_openssl();

my $t = Test::Sluice->new()->has(qw/http/)->plan(7);
my $d = $t->testdir();

sub openssl { openssl_in($d, @_) }

ec_ca_in($d, 'ca');
$t->write_file('s.ext', "basicConstraints=CA:false\nsubjectAltName=DNS:s.example\n");
ec_signed_in($d, 's', 'ca', 's.ext');
$t->write_file('index.txt', '');
openssl('ocsp -issuer ca.crt -cert s.crt -no_nonce -reqout req.der');
# openssl ocsp -index needs the certificate in its database: a valid entry.
my $serial = `openssl x509 -in $d/s.crt -noout -serial`;
$serial =~ s/^serial=//; chomp $serial;
$t->write_file('index.txt', "V\t301231000000Z\t\t$serial\tunknown\t/CN=s\n");
openssl('ocsp -index index.txt -rsigner ca.crt -rkey ca.key -CA ca.crt -reqin req.der -respout resp.der -ndays 2');
$t->write_file('notocsp.der', 'not DER');

$t->write_file_expand('sluice.conf', <<'EOF');

%%TEST_GLOBALS%%

events {
}

http {
    access_log off;
    ssl_certificate s.crt;
    ssl_certificate_key s.key;

    server {
        listen 127.0.0.1:%%PORT_8443%% ssl;
        ssl_stapling on;
        ssl_stapling_verify on;
        ssl_stapling_file resp.der;
        ssl_trusted_certificate ca.crt;
        location / { return 200 "ok"; }
    }

    server {
        listen 127.0.0.1:%%PORT_8444%% ssl;
        location / { return 200 "ok"; }
    }
}

EOF

$t->run();

sub status {
	my ($port, $args) = @_;
	my $p = port($port);
	return `echo | timeout 10 openssl s_client -connect 127.0.0.1:$p -status $args 2>&1`;
}

my $out = status(8443, '-tls1_3');
like($out, qr/OCSP Response Status: successful/, 'TLS 1.3: stapled');
like($out, qr/Cert Status: good/, 'the response of the file');
like(status(8443, '-tls1_2'), qr/OCSP Response Status: successful/, 'TLS 1.2: stapled');
like(status(8444, ''), qr/OCSP response: no response sent/, 'no stapling by default');

sub check {
	my ($body) = @_;
	$t->write_file('t.conf', "events { }\nhttp {\nserver {\n$body\n}\n}\n");
	my ($rc, undef, $err) = $t->run_binary('-p', "$d/", '-c', 't.conf', '-e', 'stderr', '-t');
	return $err;
}

my $err = check('ssl_stapling on;');
like($err, qr!\[warn\] .*"ssl_stapling" ignored: stapling is off without "ssl_stapling_file".* in \Q$d\E/t\.conf:4!,
	'stapling without a file: warned');
like($err, qr/test is successful/, 'and accepted');
like(check('ssl_certificate s.crt; ssl_certificate_key s.key; ssl_stapling on; ssl_stapling_file notocsp.der;'),
	qr!\[emerg\] .*cannot load OCSP response "\Q$d\E/notocsp\.der": .* in \Q$d\E/t\.conf:4!, 'not an OCSP response');
