#!/usr/bin/perl

# proxy_redirect: the default rewrites the proxy_pass URL in upstream Location
# and Refresh headers to the location prefix (or / without a URI part);
# a rewritten Location that is a path is completed with the request's host
# and port (absolute_redirect, as nginx's header filter), Refresh is not;
# explicit rules; regular expressions (~, ~*) with captures, tried in order
# with the text rules; off. X-Accel-Redirect from the upstream.

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
        location /re/ {
            proxy_pass http://127.0.0.1:%%PORT_8081%%/two/;
            proxy_redirect ~^http://([^:/]+):\d+(/.+)$ http://$1$2;
        }
        location /order/ {
            proxy_pass http://127.0.0.1:%%PORT_8081%%/two/;
            proxy_redirect ~/nomatch/ /x/;
            proxy_redirect ~/TWO/(?<rest>.+)$ /case/$rest;
            proxy_redirect ~*/TWO/(?<rest>.+)$ /nocase/$rest?h=$host;
            proxy_redirect ~/two/(.+)$ /second/$1;
        }
        location /mixed/ {
            proxy_pass http://127.0.0.1:%%PORT_8081%%/two/;
            proxy_redirect http://127.0.0.1:%%PORT_8081%%/two/t /text/;
            proxy_redirect ~.* /regex;
        }
        location /loc {
            rewrite ^/loc(\d)/(.*)$ /x/$2 break;
            proxy_pass http://127.0.0.1:%%PORT_8081%%;
            proxy_redirect ~two /from-rewrite-$1;
        }
    }
}

EOF

$t->backend(port(8081));
$t->run();
my $p = port(8081);
my $p0 = port(8080);

my $r = http_get('/one/redir');
like($r, qr!^Location: http://localhost:$p0/one/target\r$!m, 'default with a URI part: the location prefix');
like($r, qr!^Refresh: 0; url=/one/refresh\r$!m, 'Refresh rewritten too');
like(http_get('/redir'), qr!^Location: http://localhost:$p0/two/target\r$!m, 'default without a URI part: /');
like(http_get('/off/redir'), qr!^Location: http://127\.0\.0\.1:$p/two/target\r$!m, 'off');
like(http_get('/rule/redir'), qr!^Location: http://example\.com/localhost/target\r$!m, 'explicit rule with a variable');

# Regular expressions: the whole URL becomes the replacement, with captures.
$r = http_get('/re/redir');
like($r, qr!^Location: http://127\.0\.0\.1/two/target\r$!m, 'regex with positional captures');
like($r, qr!^Refresh: 0; url=http://127\.0\.0\.1/two/refresh\r$!m, 'regex on Refresh after url=');
$r = http_get('/order/redir');
like($r, qr!^Location: http://localhost:$p0/nocase/target\?h=localhost\r$!m,
	'~* matches case-insensitively, ~ does not; a named capture and a variable');
like($r, qr!^Refresh: 0; url=/nocase/refresh\?h=localhost\r$!m, 'the first match wins');
$r = http_get('/mixed/redir');
like($r, qr!^Location: http://localhost:$p0/text/arget\r$!m, 'a text rule before a regex');
like($r, qr!^Refresh: 0; url=/regex\r$!m, 'the regex when the text rule does not match');
like(http_get('/loc7/redir'), qr!^Location: http://localhost:$p0/from-rewrite-7\r$!m,
	'a regex without groups leaves $1 to the rewrite\'s');

# X-Accel-Redirect: an internal redirect (GET), the header not shown.
my $a = http("POST /a/accel HTTP/1.0\nHost: localhost\nContent-Length: 0\n\n");
like($a, qr!\r\n\r\ninternal /internal GET$!, 'X-Accel-Redirect to a URI');
unlike($a, qr!X-Accel!i, 'the header is not passed');
like(http_get('/a/accel/@named'), qr!\r\n\r\nnamed$!, 'X-Accel-Redirect to a named location');

$t->stop();

# A broken regex: -t fails with the file and line.
my $d = $t->testdir();
for my $c (['~(', '\\('], ['~*[a', '\\[a']) {
	my ($re, $shown) = @$c;
	$t->write_file('bad.conf', "events {}\nhttp {\nserver {\nlocation / {\n"
		. "proxy_pass http://127.0.0.1:$p;\nproxy_redirect $re /;\n}\n}\n}\n");
	my ($rc, $out, $err) = $t->run_binary('-p', "$d/", '-c', 'bad.conf', '-e', 'bad.log', '-t');
	like($err, qr/^sluice: \[emerg\] regex "$shown" is invalid: [^\n]* in \Q$d\E\/bad\.conf:6$/m,
		"bad regex $re refused at its line");
}
