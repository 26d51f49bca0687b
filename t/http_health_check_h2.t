#!/usr/bin/perl

# health_check where the location speaks HTTP/2 to its peers (nginx as the
# backend): proxy_http_version 2 checks are HTTP/2 GETs (prior knowledge in
# plain, ALPN h2 over TLS with the location's proxy_ssl_* settings), with
# keepalive_time= on one connection, else one each; type=grpc over grpcs://
# with the grpc_ssl_* settings (the backend answers grpc-status 12, which
# grpc_status=12 passes); a name the certificate does not match fails
# while SSL handshaking.

use warnings;
use strict;

use Test::More;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;
use Test::Sluice::Ssl qw/need_openssl ec_ca_in ec_signed_in/;
use Test::Sluice::Grpc qw/need_nginx_h2 nginx_backend/;

need_openssl();
need_nginx_h2();

my $t = Test::Sluice->new()->has(qw/http proxy upstream_zone/)->plan(10);
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

    upstream h { zone h 64k; server 127.0.0.1:%%PORT_8081%% max_fails=0; }
    upstream hs { zone hs 64k; server 127.0.0.1:%%PORT_8082%% max_fails=0; }
    upstream gs { zone gs 64k; server 127.0.0.1:%%PORT_8082%% max_fails=0; }
    upstream gw { zone gw 64k; server 127.0.0.1:%%PORT_8082%% max_fails=0; }

    server {
        listen 127.0.0.1:%%PORT_8080%%;

        location /h/ {
            proxy_pass http://h;
            proxy_http_version 2;
            proxy_set_header X-Check yes;
            health_check interval=200ms uri=/health keepalive_time=1h;
        }
        location /hs/ {
            proxy_pass https://hs;
            proxy_http_version 2;
            proxy_ssl_verify on;
            proxy_ssl_trusted_certificate ca.crt;
            proxy_ssl_name backend.test;
            proxy_ssl_server_name on;
            health_check interval=200ms uri=/health;
        }
        location /gs/ {
            grpc_pass grpcs://gs;
            grpc_ssl_verify on;
            grpc_ssl_trusted_certificate ca.crt;
            grpc_ssl_name backend.test;
            grpc_ssl_server_name on;
            health_check interval=200ms type=grpc grpc_status=12;
        }
        location /gw/ {
            grpc_pass grpcs://gw;
            grpc_ssl_verify on;
            grpc_ssl_trusted_certificate ca.crt;
            grpc_ssl_name other.test;
            health_check interval=200ms type=grpc grpc_status=12;
        }
        location /api/ { api; }
    }
}

EOF

my $nd = nginx_backend($t, 'h2', <<"EOF");
log_format hc '\$server_port \$request_method \$request_uri \$server_protocol c=\$connection '
    'sni=\$ssl_server_name x=\$http_x_check ua=\$http_user_agent';
access_log $d/nginx_h2/hc.log hc;
server {
    listen 127.0.0.1:@{[ port(8081) ]} http2;
    location / { return 200 "ok\\n"; }
}
server {
    listen 127.0.0.1:@{[ port(8082) ]} ssl http2;
    ssl_certificate $d/backend.crt;
    ssl_certificate_key $d/backend.key;
    location / { return 200 "ok\\n"; }
    location = /grpc.health.v1.Health/Check {
        add_header grpc-status 12 always;
        return 200 "";
    }
}
EOF
$t->run();

my ($p1, $p2) = (port(8081), port(8082));

sub up_after_checks {
	my ($u, $p) = @_;
	return poll_until(sub { my $j = upstream_peer($u, $p);
		$j->{state} eq 'up' && $j->{health_checks}{checks} >= 4 && $j->{health_checks}{fails} == 0 }, 8);
}

# Lines of nginx's log for port $p and URI $uri.
sub logged {
	my ($p, $uri) = @_;
	open my $f, '<', "$nd/hc.log" or return ();
	return grep { /^$p \S+ \Q$uri\E / } <$f>;
}

ok(up_after_checks('h', $p1), 'proxy_http_version 2: checks pass');
my @l = logged($p1, '/health');
ok(@l >= 3 && !(grep { !m! GET /health HTTP/2\.0 ! } @l), 'they are HTTP/2 GETs');
my %conns = map { /c=(\d+)/ ? ($1 => 1) : () } @l;
is(scalar keys %conns, 1, 'keepalive_time=: one HTTP/2 connection for them all');
like($l[-1] // '', qr/ x=yes ua=sluice health check$/, 'with the location\'s plain headers');

ok(up_after_checks('hs', $p2), 'HTTP/2 over TLS: checks pass');
@l = logged($p2, '/health');
%conns = map { /c=(\d+)/ ? ($1 => 1) : () } @l;
ok(@l >= 3 && keys %conns == @l, 'without keepalive_time=: a connection each');
like($l[-1] // '', qr/ HTTP\/2\.0 c=\d+ sni=backend\.test /, 'proxy_ssl_name as SNI');

ok(up_after_checks('gs', $p2), 'type=grpc over grpcs://: grpc_status=12 passes');
like((logged($p2, '/grpc.health.v1.Health/Check'))[-1] // '',
	qr/ POST \S+ HTTP\/2\.0 c=\d+ sni=backend\.test /, 'the Check over TLS, grpc_ssl_name as SNI');

ok(poll_until(sub { $t->read_file('error.log') =~
	/peer is unhealthy while SSL handshaking to upstream, health check "" of peer 127\.0\.0\.1:$p2 in upstream "gw"/ }, 6),
	'a name the certificate does not match fails while SSL handshaking');
