#!/usr/bin/perl

# limit_except: the block's allow/deny and auth_basic apply to the methods
# it does not list (GET lists HEAD too), 403 or 401 as nginx; the listed
# methods keep the location's rules; nested locations inherit it.

use warnings;
use strict;

use Test::More;
use MIME::Base64;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;

my $t = Test::Sluice->new()->has(qw/http auth_basic access/)->plan(13);

$t->write_file_expand('sluice.conf', <<'EOF');

%%TEST_GLOBALS%%

events {
}

http {
    access_log off;

    server {
        listen 127.0.0.1:%%PORT_8080%%;
        server_name localhost;
        root %%TESTDIR%%/html;

        location /ro/ {
            limit_except GET { deny all; }
            location /ro/in/ { }
        }
        location /auth {
            limit_except GET {
                auth_basic "writers";
                auth_basic_user_file %%TESTDIR%%/htpasswd;
            }
        }
        location /ok { limit_except GET { allow 127.0.0.1; deny all; } }
        location /both { deny all; limit_except GET { allow all; } }
        location /put { limit_except PUT DELETE { deny all; } }
    }
}

EOF

$t->write_file('htpasswd', "user:{PLAIN}secret\n");
mkdir($t->testdir . "/$_") for qw(html html/ro html/ro/in);
$t->write_file("html/$_", 'file') for qw(ro/f ro/in/f auth ok both put);
$t->run();

sub req {
	my ($method, $uri, $extra) = @_;
	return http("$method $uri HTTP/1.0\nHost: localhost\n" . ($extra // '')
		. "Content-Length: 0\n\n");
}

like(req('GET', '/ro/f'), qr!^HTTP/1\.1 200 !, 'a listed method: served');
like(req('HEAD', '/ro/f'), qr!^HTTP/1\.1 200 !, 'GET lists HEAD');
like(req('POST', '/ro/f'), qr!^HTTP/1\.1 403 !, 'another method: the block denies it');
like(req('DELETE', '/ro/in/f'), qr!^HTTP/1\.1 403 !, 'a nested location inherits it');
ok($t->waitforlog(qr/access forbidden by rule/), 'logged as nginx');

my $r = req('POST', '/auth');
like($r, qr!^HTTP/1\.1 401 !, 'auth_basic in the block: 401');
like($r, qr!^WWW-Authenticate: Basic realm="writers"\r$!m, 'with the block\'s realm');
like(req('POST', '/auth', 'Authorization: Basic ' . encode_base64('user:secret', '') . "\n"),
	qr!^HTTP/1\.1 405 !, 'with credentials, on to the handler (static: 405)');
like(req('GET', '/auth'), qr!^HTTP/1\.1 200 !, 'GET needs none');

like(req('POST', '/ok'), qr!^HTTP/1\.1 405 !, 'allowed by the block\'s rule');
like(req('GET', '/both'), qr!^HTTP/1\.1 403 !, 'a listed method: the location\'s rules');
like(req('POST', '/both'), qr!^HTTP/1\.1 405 !, 'another: the block\'s rules instead');
like(req('GET', '/put'), qr!^HTTP/1\.1 403 !, 'GET is not listed there');

$t->stop();
