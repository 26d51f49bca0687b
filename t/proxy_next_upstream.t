#!/usr/bin/perl

# proxy_next_upstream: conditions, tries, timeout, non-idempotent requests,
# the last try passing the upstream's answer through, no live upstreams, and
# the error-log lines nginx writes for each.

use warnings;
use strict;

use Test::More;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;

my $t = Test::Sluice->new()->has(qw/http/)->plan(17);

$t->write_file_expand('sluice.conf', <<'EOF');

%%TEST_GLOBALS%%

events {
}

http {
    log_format up '$request_uri $status [$upstream_addr] [$upstream_status]';
    access_log %%TESTDIR%%/access.log up;

    upstream s500 { server 127.0.0.1:%%PORT_8083%% max_fails=0; server 127.0.0.1:%%PORT_8081%%; }
    upstream both500 { server 127.0.0.1:%%PORT_8083%%; server 127.0.0.1:%%PORT_8084%%; }
    upstream closing { server 127.0.0.1:%%PORT_8085%% max_fails=0 weight=100; server 127.0.0.1:%%PORT_8081%%; }
    upstream slow { server 127.0.0.1:%%PORT_8086%% max_fails=0 weight=100; server 127.0.0.1:%%PORT_8081%%; }
    upstream dead { server 127.0.0.1:%%PORT_8089%%; server 127.0.0.1:%%PORT_8081%%; }
    upstream gone { server 127.0.0.1:%%PORT_8089%% down; server 127.0.0.1:%%PORT_8088%% down; }
    upstream s404 { server 127.0.0.1:%%PORT_8087%%; server 127.0.0.1:%%PORT_8081%%; }

    server {
        listen 127.0.0.1:%%PORT_8080%%;

        location /s500 { proxy_pass http://s500; proxy_next_upstream error timeout http_500; }
        location /both500 { proxy_pass http://both500; proxy_next_upstream http_500; }
        location /nonext { proxy_pass http://s500; }
        location /closing { proxy_pass http://closing; }
        location /closing-ni { proxy_pass http://closing; proxy_next_upstream error non_idempotent; }
        location /tries { proxy_pass http://closing; proxy_next_upstream_tries 1; }
        location /off { proxy_pass http://closing; proxy_next_upstream off; }
        location /slow { proxy_pass http://slow; proxy_read_timeout 500ms; proxy_send_timeout 1ms; }
        location /slow-budget {
            proxy_pass http://slow;
            proxy_read_timeout 500ms; proxy_send_timeout 1ms;
            proxy_next_upstream_timeout 200ms;
        }
        location /dead { proxy_pass http://dead; }
        location /gone { proxy_pass http://gone; }
        location /s404 { proxy_pass http://s404; proxy_next_upstream http_404; }
    }
}

EOF

$t->backend(port(8081));
$t->backend(port(8083), status => 500);
$t->backend(port(8084), status => 500);
$t->backend(port(8085), close_all => 1);
$t->backend(port(8086), delay => 2);
$t->backend(port(8087), status => 404);
$t->run();

my ($p1) = (port(8081));

# The failing peers have weight=100: with smooth round robin they are the
# first choice of each of the first 50 requests, so every test meets them.

like(http_get('/s500'), qr/^X-Port: $p1/m, 'http_500 retried on the next peer');
like(http_get('/both500'), qr/^HTTP\/1\.1 500 Test.*X-Port: \d+/s, 'last try passes the 500 through');
like(http_get('/nonext'), qr/^HTTP\/1\.1 (500 Test|200)/, 'http_500 not retried by default');

like(http_get('/closing'), qr/^X-Port: $p1/m, 'error retried for GET');
like(http("POST /closing HTTP/1.0\nHost: localhost\nContent-Length: 3\n\nabc"),
	qr/^HTTP\/1\.1 502 /, 'POST not retried after sending');
like(http("POST /closing-ni HTTP/1.0\nHost: localhost\nContent-Length: 3\n\nabc"),
	qr/^X-Port: $p1/m, 'POST retried with non_idempotent');
like(http_get('/tries'), qr/^HTTP\/1\.1 502 /, 'proxy_next_upstream_tries 1');
like(http_get('/off'), qr/^HTTP\/1\.1 502 /, 'proxy_next_upstream off');

like(http_get('/slow'), qr/^X-Port: $p1/m, 'timeout retried');
like(http_get('/slow-budget'), qr/^HTTP\/1\.1 504 Gateway Time-out/, 'next_upstream_timeout: 504');

like(http_get('/dead'), qr/^X-Port: $p1/m, 'connect error retried');
like(http_get('/gone'), qr/^HTTP\/1\.1 502 Bad Gateway/, 'no live upstreams: 502');
like(http_get('/s404'), qr/^X-Port: $p1/m, 'http_404 retried');

my $log = $t->read_file('error.log');
like($log, qr/\[error\] \d+#0: \*\d+ connect\(\) failed \(111: Connection refused\) while connecting to upstream, client: 127\.0\.0\.1, server: , request: "GET \/dead HTTP\/1\.0", upstream: "http:\/\/127\.0\.0\.1:\d+\/dead", host: "localhost"/,
	'connect() failed line');
like($log, qr/\[error\] .*no live upstreams while connecting to upstream, .*upstream: "http:\/\/gone\/gone"/,
	'no live upstreams line');
like($log, qr/\[error\] .*upstream timed out \(110: Connection timed out\) while reading response header from upstream/,
	'timeout line');

ok($t->waitforlog(qr!^/gone 502 \[gone\] \[502\]$!m, 3, 'access.log')
	&& $t->read_file('access.log') =~ m!^/s500 200 \[127\.0\.0\.1:\d+, 127\.0\.0\.1:$p1\] \[500, 200\]$!m,
	'$upstream_addr and $upstream_status list attempts');
