#!/usr/bin/perl

# error_page (internal redirect, =code, =, named location, redirect) and
# add_header (statuses, always, inheritance only when a level has none).

use warnings;
use strict;

use Test::More;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;

my $t = Test::Sluice->new()->has(qw/http/)->plan(16);

$t->write_file_expand('sluice.conf', <<'EOF');

%%TEST_GLOBALS%%

events {
}

http {
    access_log off;
    add_header X-Http http;

    upstream dead { server 127.0.0.1:%%PORT_8089%%; }

    server {
        listen 127.0.0.1:%%PORT_8080%%;

        location /page { return 200 "page for $uri"; }
        location /nf { error_page 404 /page; return 404; }
        location /nf-code { error_page 404 =200 /page; return 404; }
        location /nf-target { error_page 404 = /page; return 404; }
        location /named { error_page 502 @fallback; proxy_pass http://dead; }
        location @fallback { return 200 "fallback"; }
        location /redir { error_page 502 504 redirect; proxy_pass http://dead; }
        location /ret302 { error_page 302 =200 /page; return 302 /elsewhere; }
        location /ret302-plain { return 302 /elsewhere; }
        location /redir301 { error_page 404 =301 http://example.com/; return 404; }

        location /always {
            add_header X-Always yes always;
            add_header X-Plain yes;
            return 404;
        }
        location /ok { add_header X-Loc loc; add_header X-CSRF-Token t; return 200 ok; }
        location /inherit { return 200 inherit; }
        location /empty { add_header X-Empty ""; return 200 empty; }
    }
}

EOF

$t->run();

like(http_get('/nf'), qr!^HTTP/1\.1 404 Not Found\r\n.*\r\n\r\npage for /page$!s, 'error_page keeps the status');
like(http_get('/nf-code'), qr!^HTTP/1\.1 200 OK\r\n.*page for /page$!s, 'error_page =200');
like(http_get('/nf-target'), qr!^HTTP/1\.1 200 OK\r\n.*page for /page$!s, 'error_page =');
like(http_get('/named'), qr!^HTTP/1\.1 502 Bad Gateway\r\n.*fallback$!s, 'named location');
my $r = http_get('/redir');
like($r, qr!^HTTP/1\.1 302 Moved Temporarily\r\n.*Location: redirect\r\n!s, 'error_page to a non-URI: 302');
like($r, qr!^X-Http: http\r$!m, 'add_header applies to that 302');
like(http_get('/ret302'), qr!^HTTP/1\.1 200 OK\r\n.*page for /page$!s, 'error_page applies to a return redirect');
like(http_get('/ret302-plain'), qr!^HTTP/1\.1 302 .*Location: http://localhost(:\d+)?/elsewhere\r\n!s,
	'... and without one the redirect is sent');
like(http_get('/redir301'), qr!^HTTP/1\.1 301 .*Location: http://example\.com/\r\n!s, 'error_page =301 URL');

$r = http_get('/always');
like($r, qr!^X-Always: yes\r$!mi, 'always on a 404');
unlike($r, qr!X-Plain!i, 'not without always on a 404');

$r = http_get('/ok');
like($r, qr!^X-Loc: loc\r$!mi, 'location add_header');
like($r, qr!^X-CSRF-Token: t\r$!m, 'add_header name case kept');
unlike($r, qr!X-Http!i, 'http level not inherited when the location has its own');
like(http_get('/inherit'), qr!^X-Http: http\r$!mi, 'inherited when the location has none');
unlike(http_get('/empty'), qr!X-Empty!i, 'an empty value adds nothing');
