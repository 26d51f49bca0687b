#!/usr/bin/perl

# proxy_redirect: the default rewrites the proxy_pass URL in upstream Location
# and Refresh headers to the location prefix (or / without a URI part);
# explicit rules; off. X-Accel-Redirect from the upstream.

use warnings;
use strict;

use Test::More;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;

my $t = Test::Sluice->new()->has(qw/http/)->plan(8);

$t->write_file_expand('sluice.conf', <<'EOF');

%%TEST_GLOBALS%%

events {
}

http {
    access_log off;

    server {
        listen 127.0.0.1:%%PORT_8080%%;

        location /one/ { proxy_pass http://127.0.0.1:%%PORT_8081%%/two/; }
        location / { proxy_pass http://127.0.0.1:%%PORT_8081%%; }
        location /off/ { proxy_pass http://127.0.0.1:%%PORT_8081%%/two/; proxy_redirect off; }
        location /a/ { proxy_pass http://127.0.0.1:%%PORT_8081%%; }
        location /internal { return 200 "internal $uri $request_method"; }
        location @named { return 200 "named"; }
        location /rule/ {
            proxy_pass http://127.0.0.1:%%PORT_8081%%/two/;
            proxy_redirect http://127.0.0.1:%%PORT_8081%%/two/ http://example.com/$host/;
        }
    }
}

EOF

$t->backend(port(8081));
$t->run();
my $p = port(8081);

my $r = http_get('/one/redir');
like($r, qr!^Location: /one/target\r$!m, 'default with a URI part: the location prefix');
like($r, qr!^Refresh: 0; url=/one/refresh\r$!m, 'Refresh rewritten too');
like(http_get('/redir'), qr!^Location: /two/target\r$!m, 'default without a URI part: /');
like(http_get('/off/redir'), qr!^Location: http://127\.0\.0\.1:$p/two/target\r$!m, 'off');
like(http_get('/rule/redir'), qr!^Location: http://example\.com/localhost/target\r$!m, 'explicit rule with a variable');

# X-Accel-Redirect: an internal redirect (GET), the header not shown.
my $a = http("POST /a/accel HTTP/1.0\nHost: localhost\nContent-Length: 0\n\n");
like($a, qr!\r\n\r\ninternal /internal GET$!, 'X-Accel-Redirect to a URI');
unlike($a, qr!X-Accel!i, 'the header is not passed');
like(http_get('/a/accel/@named'), qr!\r\n\r\nnamed$!, 'X-Accel-Redirect to a named location');
