#!/usr/bin/perl

# auth_request: a GET subrequest to an internal location with the client's
# headers and no body; 2xx lets the request on (a POST's body still reaches
# its own upstream), 401 (with the subrequest's WWW-Authenticate) and 403
# are answered, anything else is 500 and logged; auth_request_set takes
# $upstream_http_* of the subrequest; auth_request off in a nested
# location; a static (return) auth location. (return and rewrite run
# before it, as in nginx, so the content here is files.)

use warnings;
use strict;

use Test::More;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;

my $t = Test::Sluice->new()->has(qw/http proxy/)->plan(15)
	->expect_errors(qr/auth request unexpected status: 404/);

$t->write_file_expand('sluice.conf', <<'EOF');

%%TEST_GLOBALS%%

events {
}

http {
    server {
        listen 127.0.0.1:%%PORT_8080%%;
        server_name localhost;

        location = /auth {
            internal;
            proxy_pass http://127.0.0.1:%%PORT_8081%%/check$request_uri;
        }
        location = /auth-static { internal; return 204; }

        location / {
            auth_request /auth;
            auth_request_set $user $upstream_http_x_user;
            add_header X-User $user always;
            root %%TESTDIR%%;
            location /open { auth_request off; }
        }
        location /post {
            auth_request /auth;
            proxy_pass http://127.0.0.1:%%PORT_8081%%;
        }
        location /static {
            auth_request /auth-static;
            root %%TESTDIR%%;
        }
    }
}

EOF

$t->raw_backend(port(8081),
	'/check/ok' => "HTTP/1.1 200 OK\r\nX-User: alice\r\nContent-Length: 7\r\n\r\nignored",
	'/check/deny' => "HTTP/1.1 403 Forbidden\r\nX-User: mallory\r\nContent-Length: 0\r\n\r\n",
	'/check/unauth' => "HTTP/1.1 401 Unauthorized\r\nWWW-Authenticate: Bearer realm=\"x\"\r\nContent-Length: 0\r\n\r\n",
	'/check/weird' => "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n",
	'/check/post' => "HTTP/1.1 204 No Content\r\n\r\n",
	'/post' => "HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\npost done",
);

$t->write_file($_, "file $_") for qw/ok deny unauth weird open static/;

$t->run();

my $r = http_get('/ok');
like($r, qr/^HTTP\/1\.1 200 /, '2xx allows');
like($r, qr/^X-User: alice\r$/m, 'auth_request_set from $upstream_http_x_user');
like($r, qr/file ok$/, 'content served');
unlike($r, qr/ignored/, 'subrequest body not sent');

$r = http_get('/deny');
like($r, qr/^HTTP\/1\.1 403 /, '403 returned');
like($r, qr/^X-User: mallory\r$/m, 'auth_request_set on a refusal too');

$r = http_get('/unauth');
like($r, qr/^HTTP\/1\.1 401 /, '401 returned');
like($r, qr/^WWW-Authenticate: Bearer realm="x"\r$/m, 'with the subrequest\'s challenge');

like(http_get('/weird'), qr/^HTTP\/1\.1 500 /, 'other status: 500');
ok($t->waitforlog(qr/\[error\] .*auth request unexpected status: 404/), 'logged');

like(http_get('/open'), qr/file open$/, 'off');
like(http_get('/auth'), qr/^HTTP\/1\.1 404 /, 'auth location internal');
like(http_get('/static'), qr/file static$/, 'static auth location');

$r = http(<<EOF, body => 'hello');
POST /post HTTP/1.0
Host: localhost
X-Token: secret
Content-Length: 5

EOF
like($r, qr/post done$/, 'POST after auth');
my ($sub) = grep { m{^GET /check/post } } $t->raw_requests(port(8081));
ok(defined $sub && $sub =~ /^X-Token: secret\r$/m && $sub !~ /^Content-Length:/mi
	&& $sub !~ /hello/, 'subrequest: GET, client headers, no body');
