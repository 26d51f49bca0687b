#!/usr/bin/perl

# recursive_error_pages: off (the default), an error_page target's own error
# gets the built-in page; on, it may use error_page again, as the location
# that sent the error decides; a cycle stops after 10 pages with a 500.

use warnings;
use strict;

use Test::More;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;

my $t = Test::Sluice->new()->has(qw/http/)->plan(7);

$t->write_file_expand('sluice.conf', <<'EOF');

%%TEST_GLOBALS%%

events {
}

http {
    access_log off;

    server {
        listen 127.0.0.1:%%PORT_8080%%;
        server_name localhost;

        location /page { return 200 "page for $uri"; }
        location /missing { error_page 404 /page; return 404; }
        location /off { error_page 404 /missing; return 404; }
        location /on { recursive_error_pages on; error_page 404 /missing; return 404; }
        location /code {
            recursive_error_pages on;
            error_page 404 =200 /fail;
            return 404;
        }
        location /fail {
            recursive_error_pages on;
            error_page 500 =503 /page;
            return 500;
        }
        location /chain { recursive_error_pages on; error_page 404 /stop; return 404; }
        location /stop { error_page 404 /missing; return 404; }
        location /loop { recursive_error_pages on; error_page 404 /loop; return 404; }
    }
}

EOF

$t->run();

like(http_get('/off'), qr!^HTTP/1\.1 404 Not Found\r\n.*<title>404 Not Found</title>!s,
	'off: the target\'s error gets the built-in page');
like(http_get('/on'), qr!^HTTP/1\.1 404 Not Found\r\n.*\r\n\r\npage for /page$!s,
	'on: the target\'s error_page applies');
like(http_get('/code'), qr!^HTTP/1\.1 503 Service Temporarily Unavailable\r\n.*\r\n\r\npage for /page$!s,
	'the last error_page\'s status wins');
like(http_get('/chain'), qr!^HTTP/1\.1 404 Not Found\r\n.*<title>404 Not Found</title>!s,
	'a target with it off stops the chain');
like(http_get('/loop'), qr!^HTTP/1\.1 500 Internal Server Error\r\n!s, 'a cycle ends in 500');
ok($t->waitforlog(qr/rewrite or internal redirection cycle while internally redirecting to "\/loop"/),
	'logged as nginx');
like(http_get('/page'), qr!page for /page$!, 'still serving');

$t->stop();
