#!/usr/bin/perl

# proxy_cookie_domain and proxy_cookie_path (text, case and leading dot of a
# domain, path prefix, regex with captures, variables, first rule only,
# off in a nested location); proxy_ignore_headers X-Accel-Redirect passes
# the body on instead of redirecting (the header stays hidden) (other names accepted);
# proxy_method, fixed and from a variable.

use warnings;
use strict;

use Test::More;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;

my $t = Test::Sluice->new()->has(qw/http proxy/)->plan(12);

$t->write_file_expand('sluice.conf', <<'EOF');

%%TEST_GLOBALS%%

events {
}

http {
    server {
        listen 127.0.0.1:%%PORT_8080%%;
        server_name localhost;

        location / {
            proxy_pass http://127.0.0.1:%%PORT_8081%%;
            proxy_cookie_domain up.example $host;
            proxy_cookie_domain ~^(\w+)\.internal$ $1.public;
            proxy_cookie_path /app/ /;
            proxy_cookie_path ~*^/CASE/(.*)$ /lower/$1;
            location /plain { proxy_pass http://127.0.0.1:%%PORT_8081%%; proxy_cookie_domain off; proxy_cookie_path off; }
        }
        location /accel {
            proxy_pass http://127.0.0.1:%%PORT_8081%%;
            proxy_ignore_headers X-Accel-Redirect X-Accel-Expires Expires Cache-Control Set-Cookie Vary X-Accel-Limit-Rate X-Accel-Buffering X-Accel-Charset;
        }
        location /accel-on { proxy_pass http://127.0.0.1:%%PORT_8081%%; }
        location /target { return 200 "redirected"; }
        location /m/ { proxy_pass http://127.0.0.1:%%PORT_8081%%; proxy_method HEAD; }
        location /v/ { proxy_pass http://127.0.0.1:%%PORT_8081%%; proxy_method $arg_m; }
    }
}

EOF

my $cookies = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n"
	. "Set-Cookie: a=1; Domain=.UP.example; Path=/app/x; HttpOnly\r\n"
	. "Set-Cookie: b=2; domain=shop.internal; path=/case/y\r\n"
	. "Set-Cookie: c=3; domain=other.example; path=/else\r\n"
	. "\r\nok";
my $accel = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nX-Accel-Redirect: /target\r\n\r\nup";
$t->raw_backend(port(8081),
	'/c' => $cookies,
	'/plain' => $cookies,
	'/accel' => $accel,
	'/accel-on' => $accel,
);

$t->run();

my $r = http_get('/c');
like($r, qr/^Set-Cookie: a=1; Domain=\.localhost; Path=\/x; HttpOnly\r$/m, 'text domain and path');
like($r, qr/^Set-Cookie: b=2; domain=shop\.public; path=\/lower\/y\r$/m, 'regex domain and path');
like($r, qr/^Set-Cookie: c=3; domain=other\.example; path=\/else\r$/m, 'no rule matches');

$r = http_get('/plain');
like($r, qr/^Set-Cookie: a=1; Domain=\.UP\.example; Path=\/app\/x; HttpOnly\r$/m, 'off');

$r = http_get('/accel');
like($r, qr/up$/, 'X-Accel-Redirect ignored');
unlike($r, qr/^X-Accel-Redirect:/mi, 'ignored header still hidden, as nginx hides it');
like(http_get('/accel-on'), qr/redirected$/, 'X-Accel-Redirect honoured');

http_get('/m/x');
like(http_get('/v/y?m=PUT'), qr/^HTTP\/1\.1 200 /, 'variable method answered');
http_get('/v/z');
my @log = $t->raw_log(port(8081));
my %method = map { $_->[2] => $_->[1] } @log;
is($method{'/m/x'}, 'HEAD', 'proxy_method');
is($method{'/v/y?m=PUT'}, 'PUT', 'proxy_method from a variable');
is($method{'/v/z'}, 'GET', 'empty variable: the client\'s method');
is($method{'/c'}, 'GET', 'no proxy_method');
