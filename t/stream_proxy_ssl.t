#!/usr/bin/perl

# TLS to upstreams from stream servers (proxy_ssl on): plain clients reach
# TLS backends (sluice's own http ssl servers); SNI with
# proxy_ssl_server_name and the name proxy_ssl_name makes; proxy_ssl_verify
# with the right CA, a wrong CA and a name that does not match; a client
# certificate for a backend that asks for one; proxy_ssl_protocols the
# backend does not speak; a handshake failure (a plain peer) is a connect
# failure: the next peer is tried, and the error log says it as nginx.
# Keys and certificates are made with the openssl command.

use warnings;
use strict;

use Test::More;
use IO::Socket::INET;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;
use Test::Sluice::Ssl qw/need_openssl ec_ca_in ec_signed_in/;

need_openssl();

my $t = Test::Sluice->new()->has(qw/stream http/)->plan(12);
my $d = $t->testdir();


$t->write_file('leaf.ext', "basicConstraints=CA:FALSE\nsubjectAltName=DNS:backend.example\n");
ec_ca_in($d, $_) for 'ca', 'other';
ec_signed_in($d, $_, 'ca', 'leaf.ext') for 'backend', 'client';

$t->write_file_expand('sluice.conf', <<'EOF');

%%TEST_GLOBALS%%

worker_processes 1;

events {
}

http {
    access_log off;

    ssl_certificate     backend.crt;
    ssl_certificate_key backend.key;

    server {
        listen 127.0.0.1:%%PORT_8443%% ssl;
        location / { return 200 "tls $ssl_protocol|$ssl_server_name|$ssl_client_s_dn"; }
    }

    server {
        listen 127.0.0.1:%%PORT_8444%% ssl;
        ssl_verify_client on;
        ssl_client_certificate ca.crt;
        location / { return 200 "mtls $ssl_client_s_dn"; }
    }

    server {
        listen 127.0.0.1:%%PORT_8445%% ssl;
        ssl_protocols TLSv1.3;
        location / { return 200 "v13"; }
    }

    server {
        listen 127.0.0.1:%%PORT_8080%%;
        location / { return 200 "plain"; }
    }
}

stream {
    proxy_connect_timeout 3s;
    proxy_ssl on;
    log_format up "$server_port $status $upstream_addr";
    access_log %%TESTDIR%%/stream.log up;

    upstream plain_first {
        server 127.0.0.1:%%PORT_8080%%;
        server 127.0.0.1:%%PORT_8443%%;
    }

    server {
        listen 127.0.0.1:%%PORT_8070%%;
        proxy_pass 127.0.0.1:%%PORT_8443%%;
    }

    server {
        listen 127.0.0.1:%%PORT_8071%%;
        proxy_pass 127.0.0.1:%%PORT_8443%%;
        proxy_ssl_server_name on;
        proxy_ssl_name backend.example;
        proxy_ssl_verify on;
        proxy_ssl_trusted_certificate ca.crt;
    }

    server {
        listen 127.0.0.1:%%PORT_8072%%;
        proxy_pass 127.0.0.1:%%PORT_8443%%;
        proxy_ssl_name backend.example;
        proxy_ssl_verify on;
        proxy_ssl_trusted_certificate other.crt;
    }

    server {
        listen 127.0.0.1:%%PORT_8073%%;
        proxy_pass 127.0.0.1:%%PORT_8443%%;
        proxy_ssl_name wrong.example;
        proxy_ssl_verify on;
        proxy_ssl_trusted_certificate ca.crt;
    }

    server {
        listen 127.0.0.1:%%PORT_8074%%;
        proxy_pass 127.0.0.1:%%PORT_8444%%;
        proxy_ssl_certificate client.crt;
        proxy_ssl_certificate_key client.key;
    }

    server {
        listen 127.0.0.1:%%PORT_8075%%;
        proxy_pass plain_first;
    }

    server {
        listen 127.0.0.1:%%PORT_8076%%;
        proxy_pass 127.0.0.1:%%PORT_8445%%;
        proxy_ssl_protocols TLSv1.2;
    }

    server {
        listen 127.0.0.1:%%PORT_8077%%;
        proxy_pass 127.0.0.1:%%PORT_8080%%;
        proxy_ssl off;
    }
}

EOF

$t->run();

# A plain request through a stream port: the backend's answer body, or ''.
sub get {
	my ($port) = @_;
	my $r = http_get('/', PeerAddr => '127.0.0.1:' . port($port)) // '';
	return $r =~ /^HTTP\/1.1 200 .*?\r\n\r\n(.*)$/s ? $1 : '';
}

like(get(8070), qr/^tls TLSv1\.3\|\|$/, 'proxy_ssl on, verify off, no SNI by default');
is(get(8071), 'tls TLSv1.3|backend.example|', 'verified, SNI proxy_ssl_name');
is(get(8072), '', 'an unknown CA: no session');
ok($t->waitforlog(qr/\[error\] \d+#\d+: \*\d+ upstream SSL certificate verify error: \(20:unable to get local issuer certificate\) while SSL handshaking to upstream, client: 127\.0\.0\.1, server: 127\.0\.0\.1:${\ port(8072)}, upstream: "127\.0\.0\.1:${\ port(8443)}"/),
	'verify error logged as nginx');
is(get(8073), '', 'a name the certificate has not: no session');
ok($t->waitforlog(qr/upstream SSL certificate does not match "wrong\.example" while SSL handshaking to upstream/),
	'name mismatch logged');
is(get(8074), 'mtls CN=client', 'client certificate sent');
is(get(8076), '', 'proxy_ssl_protocols the backend does not speak');
is(get(8077), 'plain', 'proxy_ssl off in a server');

# A plain peer fails the handshake: the next peer serves the session.

is(get(8075), 'tls TLSv1.3||', 'handshake failure: next upstream');
ok($t->waitforlog(qr/\[error\] .* while SSL handshaking to upstream, client: 127\.0\.0\.1, server: 127\.0\.0\.1:${\ port(8075)}, upstream: "127\.0\.0\.1:${\ port(8080)}"/),
	'handshake failure logged');
my $p = port(8075);
ok(poll_until(sub { $t->read_file('stream.log') =~ /^$p 200 127\.0\.0\.1:${\ port(8080)}, 127\.0\.0\.1:${\ port(8443)}$/m }),
	'access log: both peers tried');

$t->stop();
