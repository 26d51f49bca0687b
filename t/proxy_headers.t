#!/usr/bin/perl

# What goes upstream and what comes back: nginx's minimal request (Host
# $proxy_host, no Connection with HTTP/1.1, hop-by-hop headers dropped),
# proxy_set_header (and "" to remove), proxy_pass URI replacement, header-name
# case in both directions, hidden and passed response headers, HTTP/1.0
# upstreams, request bodies, client_max_body_size, proxy_set_body.

use warnings;
use strict;

use Test::More;
use IO::Select;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;

my $t = Test::Sluice->new()->has(qw/http/)->plan(31);

$t->write_file_expand('sluice.conf', <<'EOF');

%%TEST_GLOBALS%%

events {
}

http {
    access_log off;
    log_format vu '$status $upstream_addr';
    log_format up '$upstream_http_x_port|$upstream_http_x_mixed_case|$upstream_http_connection|$upstream_http_content_length';

    upstream u { server 127.0.0.1:%%PORT_8081%%; }

    server {
        listen 127.0.0.1:%%PORT_8080%%;
        server_name localhost;

        location /echo { proxy_pass http://u; }
        location /set/ {
            proxy_pass http://127.0.0.1:%%PORT_8081%%/echo/;
            proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
            proxy_set_header User-Agent "";
            proxy_set_header Host backend.example;
        }
        location /v10 { proxy_pass http://u/echo10; proxy_http_version 1.0; }
        location /noheaders { proxy_pass http://u/echo; proxy_pass_request_headers off; }
        location /nobody { proxy_pass http://u/echo; proxy_pass_request_body off; }
        location /setbody { proxy_pass http://u/echo; proxy_set_body "body from $request_method"; }
        location /small { proxy_pass http://u/echo; client_max_body_size 10; }
        location /case { proxy_pass http://127.0.0.1:%%PORT_8082%%; }
        location /hide {
            proxy_pass http://127.0.0.1:%%PORT_8082%%;
            proxy_hide_header X-Port;
            proxy_pass_header Server;
            access_log %%TESTDIR%%/up.log up;
        }
        location /hide-close {
            proxy_pass http://127.0.0.1:%%PORT_8083%%;
            access_log %%TESTDIR%%/up.log up;
        }
        location /tokens { proxy_pass http://u/echo; server_tokens off; }
        location /big { proxy_pass http://u/echo; client_max_body_size 1m; }
        location /big-nobuf { proxy_pass http://u/echo; client_max_body_size 1m; proxy_buffering off; }
        location /big-small-buffers {
            proxy_pass http://u/echo;
            client_max_body_size 1m;
            proxy_buffer_size 1k;
            proxy_buffers 2 1k;
            proxy_busy_buffers_size 1k;
        }
        location /rw/ { rewrite ^/rw/(.*)$ /echo/$1?r=1 break; proxy_pass http://u; }
        location /vu/ { proxy_pass http://u/echo$uri; access_log %%TESTDIR%%/vu.log vu; }
    }
}

EOF

$t->backend(port(8081));
$t->backend(port(8082), header_case => 1);
$t->backend(port(8083), close => 1);
$t->run();

my $p1 = port(8081);

my $r = http(<<EOF);
GET /echo/a?b=1 HTTP/1.1
Host: localhost
Connection: close
Keep-Alive: 300
TE: trailers
X-Custom-Header: value
x-lower: kept

EOF
like($r, qr!^GET /echo/a\?b=1 HTTP/1\.1\r\nHost: u\r\n!m, 'request line and Host $proxy_host first');
my ($sent) = $r =~ /\r\n\r\n(.*)/s;
unlike($sent, qr/^(Connection|Keep-Alive|TE):/mi, 'hop-by-hop headers dropped, no Connection');
like($r, qr/^X-Custom-Header: value\r$/m, 'client header passed with its case');
like($r, qr/^x-lower: kept\r$/m, 'lowercase header name kept lowercase');

$r = http(<<EOF);
GET /set/x/y HTTP/1.0
Host: localhost
User-Agent: test-agent
X-Forwarded-For: 10.0.0.1

EOF
like($r, qr!^GET /echo/x/y HTTP/1\.1\r$!m, 'URI part replaces the location prefix');
like($r, qr/^Host: backend\.example\r$/m, 'proxy_set_header Host');
like($r, qr/^X-Forwarded-For: 10\.0\.0\.1, 127\.0\.0\.1\r$/m, '$proxy_add_x_forwarded_for');
unlike($r, qr/User-Agent/i, 'empty proxy_set_header removes the header');

$r = http_get('/v10');
like($r, qr!^GET /echo10 HTTP/1\.0\r\nHost: u\r\nConnection: close\r$!m, 'proxy_http_version 1.0');

$r = http("GET /noheaders HTTP/1.0\nHost: localhost\nX-Secret: 1\n\n");
unlike($r, qr/X-Secret/, 'proxy_pass_request_headers off');

$r = http("POST /echo HTTP/1.0\nHost: localhost\nContent-Length: 5\n\nhello");
like($r, qr/^Content-Length: 5\r\n\r\nhello$/m, 'request body forwarded');

$r = http("POST /echo HTTP/1.1\nHost: localhost\nConnection: close\nTransfer-Encoding: chunked\n\n5\r\nhello\r\n0\r\n\r\n");
like($r, qr/^Content-Length: 5\r\n\r\nhello/m, 'chunked body sent with Content-Length');

$r = http("POST /nobody HTTP/1.0\nHost: localhost\nContent-Length: 5\n\nhello");
unlike($r, qr/hello/, 'proxy_pass_request_body off');

$r = http("POST /setbody HTTP/1.0\nHost: localhost\nContent-Length: 5\n\nhello");
like($r, qr/\r\n\r\nbody from POST$/, 'proxy_set_body');

$r = http("POST /small HTTP/1.0\nHost: localhost\nContent-Length: 50\n\n" . ('x' x 50));
like($r, qr/^HTTP\/1\.1 413 Request Entity Too Large/, 'client_max_body_size: 413');

$r = http_get('/case');
like($r, qr/^X-MiXeD-Case: yes\r$/m, 'upstream header case kept');
like($r, qr/^HTTP\/1\.1 200 Test\r$/m, 'upstream status line text passed');
like($r, qr/^Server: sluice/m, 'own Server header');

$r = http_get('/hide');
unlike($r, qr/X-Port/, 'proxy_hide_header');
# Headers the client does not get are still the upstream's variables: one
# hidden by proxy_hide_header, and a hop-by-hop one.
my $p2 = port(8082);
ok($t->waitforlog(qr!^$p2\|yes\|-\|\d+$!m, 3, 'up.log'), '$upstream_http_* of a hidden header');
$r = http_get('/hide-close');
my $p3 = port(8083);
ok($t->waitforlog(qr!^$p3\|-\|close\|\d+$!m, 3, 'up.log'), '$upstream_http_connection');

$r = http_get('/tokens');
like($r, qr/^Server: sluice\r$/m, 'server_tokens off');

like(http_get('/rw/a%20b?q=2'), qr!^GET /echo/a%20b\?r=1&q=2 HTTP/1\.1\r$!m, 'rewritten URI sent upstream');

# A URI made with variables goes on the request line as it is: one that a
# decoded space or control byte would end early is refused, and nothing
# goes upstream (nginx sends the broken line).
like(http_get('/vu/ab'), qr!^GET /echo/vu/ab HTTP/1\.1\r$!m, 'URI with variables sent upstream');
like(http("POST /vu/a%20b HTTP/1.0\nHost: localhost\nContent-Length: 5\n\nhello"),
	qr!^HTTP/1\.1 400 !, 'a space in it: 400');
$t->waitforfile($t->testdir() . '/vu.log');
is($t->read_file('vu.log'), "200 127.0.0.1:" . port(8081) . "\n400 -\n",
	'it went to no upstream');

# Expect: 100-continue: the interim answer comes before the body is sent.
{
	my $s = http("POST /echo HTTP/1.1\nHost: localhost\nContent-Length: 5\nExpect: 100-continue\nConnection: close\n\n", start => 1);
	my $sel = IO::Select->new($s);
	my $first = '';
	$s->sysread($first, 4096) if $sel->can_read(3);
	like($first, qr!^HTTP/1\.1 100 Continue\r\n!, 'Expect: 100-continue answered');
	$s->syswrite('hello');
	my $rest = http_end($s);
	like($rest, qr!\r\n\r\n.*hello$!s, 'then the body went upstream');
}

# Bodies larger than the buffers stream whole, with buffering on or off.
my $big = 'z' x 200_000;
for my $loc (qw/big big-nobuf big-small-buffers/) {
	my $r = http("POST /$loc HTTP/1.0\nHost: localhost\nContent-Length: 200000\n\n$big");
	my ($body) = $r =~ /\r\n\r\n(.*)$/s;
	ok(defined $body && $body =~ /\Q$big\E$/, "large response whole: $loc");
}

$t->expect_errors(qr/client intended to send too large body/);
