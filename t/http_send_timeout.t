#!/usr/bin/perl

# send_timeout closes a connection whose client stops reading the response;
# proxy_intercept_errors answers upstream errors with the location's
# error_page.

use warnings;
use strict;

use Test::More;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;

my $t = Test::Sluice->new()->has(qw/http/)->plan(3);

$t->write_file_expand('sluice.conf', <<'EOF');

%%TEST_GLOBALS%%

events {
}

http {
    access_log off;

    server {
        listen 127.0.0.1:%%PORT_8080%%;
        root %%TESTDIR%%;
        send_timeout 1s;

        location /page { return 200 "our page"; }
        location /up {
            proxy_pass http://127.0.0.1:%%PORT_8081%%;
            proxy_intercept_errors on;
            error_page 404 /page;
        }
        location /up-plain { proxy_pass http://127.0.0.1:%%PORT_8081%%; }
    }
}

EOF

$t->write_file('big.bin', 'x' x 30_000_000);
$t->backend(port(8081), status => 404);
$t->run();

like(http_get('/up'), qr!^HTTP/1\.1 404 .*\r\n\r\nour page$!s, 'proxy_intercept_errors uses error_page');
like(http_get('/up-plain'), qr!^X-Port: \d+!m, 'without it the upstream answer passes');

my $s = http("GET /big.bin HTTP/1.0\nHost: localhost\n\n", start => 1);
ok($t->waitforlog(qr/\[info\] .*client timed out \(110: Connection timed out\) while sending response to client/, 8),
	'a client that stops reading is timed out');
close $s;
