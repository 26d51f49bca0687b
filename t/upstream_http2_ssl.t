#!/usr/bin/perl

# HTTP/2 over TLS to upstreams: proxy_http_version 2 with https:// and
# grpc_pass grpcs:// reach nginx (listen ... ssl http2) with ALPN h2;
# grpc_ssl_* are the grpc_pass location's TLS settings (a certificate
# checked against grpc_ssl_name; a name it does not match fails the
# handshake, and a gRPC call then gets grpc-status 14).

use warnings;
use strict;

use Test::More;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;
use Test::Sluice::Ssl qw/need_openssl ec_ca_in ec_signed_in/;
use Test::Sluice::Grpc qw/need_nginx_h2 nginx_backend grpc_call/;

need_openssl();
need_nginx_h2();

my $t = Test::Sluice->new()->has(qw/http proxy/)->plan(6);
my $d = $t->testdir();

ec_ca_in($d, 'ca');
$t->write_file('ext', "subjectAltName=DNS:backend.test\n");
ec_signed_in($d, 'backend', 'ca', 'ext');

$t->write_file_expand('sluice.conf', <<'EOF');

%%TEST_GLOBALS%%

events {
}

http {
    access_log off;

    upstream s {
        server 127.0.0.1:%%PORT_8081%%;
    }

    server {
        listen 127.0.0.1:%%PORT_8080%%;

        location /tls/ {
            proxy_pass https://s;
            proxy_http_version 2;
        }
        location /gs/ {
            grpc_pass grpcs://s;
            grpc_ssl_verify on;
            grpc_ssl_trusted_certificate ca.crt;
            grpc_ssl_name backend.test;
            grpc_ssl_server_name on;
        }
        location /wrong/ {
            grpc_pass grpcs://s;
            grpc_ssl_verify on;
            grpc_ssl_trusted_certificate ca.crt;
            grpc_ssl_name other.test;
        }
    }
}

EOF

nginx_backend($t, 'tls', <<"EOF");
server {
    listen 127.0.0.1:@{[ port(8081) ]} ssl http2;
    ssl_certificate $d/backend.crt;
    ssl_certificate_key $d/backend.key;
    location / {
        return 200 "\$server_protocol alpn=\$ssl_alpn_protocol sni=\$ssl_server_name \$request_uri\\n";
    }
}
EOF
$t->run();

my $r = http_get('/tls/a');
like($r, qr!^HTTP/1\.1 200!, 'proxy_http_version 2 over https: 200');
like($r, qr!HTTP/2\.0 alpn=h2 sni= /tls/a!, 'HTTP/2 by ALPN h2, no SNI by default');

$r = http_get('/gs/b');
like($r, qr!HTTP/2\.0 alpn=h2 sni=backend\.test /gs/b!, 'grpcs: verified, grpc_ssl_name sent as SNI');

$r = http_get('/wrong/c');
like($r, qr!^HTTP/1\.1 502!, 'grpcs: a name the certificate does not match: 502');
$r = grpc_call('/wrong/d', messages => ['x']);
is($r->{status}, '14', 'a gRPC call there: grpc-status 14');
like($t->read_file('error.log'), qr/\[error\].*while SSL handshaking to upstream.*upstream: "grpcs:\/\/127\.0\.0\.1:\d+\/wrong\/c"/,
	'the handshake failure is logged with the grpcs:// upstream');
