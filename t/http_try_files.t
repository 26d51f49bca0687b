#!/usr/bin/perl

# try_files and internal: the first existing file (or directory, written
# with a final slash) becomes the URI its location serves; a directory found
# without its slash redirects; the fallback is an internal redirect keeping
# the method and body (its own ?args, else none) or a named location or
# =code; try_files at server level for requests no location matches; the
# redirect cycle; a missing named location; an internal location reached
# only through redirects; log_not_found; underscores_in_headers and
# ignore_invalid_headers.

use warnings;
use strict;

use Test::More;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;

my $t = Test::Sluice->new()->has(qw/http proxy rewrite/)->plan(26);
my $d = $t->testdir();

$t->write_file_expand('sluice.conf', <<'EOF');

%%TEST_GLOBALS%%

events {
}

http {
    server {
        listen 127.0.0.1:%%PORT_8080%%;
        root %%TESTDIR%%/www;

        location / {
            try_files $uri $uri/ =404;
        }
        location /app/ {
            try_files $uri /backend$uri;
        }
        location /args/ {
            try_files /none /backend/echo?from=try;
        }
        location /keepargs/ {
            try_files /none /backend/echo?$args;
        }
        location /named/ {
            try_files /none @fallback;
        }
        location /missing/ {
            try_files /none @nosuch;
        }
        location /cycle/ {
            try_files /none /cycle/again;
        }
        location /code/ {
            try_files /none =418;
        }
        location /backend/ {
            internal;
            proxy_pass http://127.0.0.1:%%PORT_8081%%/;
        }
        location /rewritten/ {
            rewrite ^/rewritten/(.*)$ /backend/$1 last;
        }
        location @fallback {
            return 200 "named $uri";
        }
        location /quiet/ {
            log_not_found off;
        }
        location /loud/ {
        }
    }

    server {
        listen 127.0.0.1:%%PORT_8082%%;
        root %%TESTDIR%%/www;
        rewrite ^/old-index.html$ /index.html;
        try_files $uri /old-index.html;
        location /loc/ { return 200 "location"; }
    }

    server {
        listen 127.0.0.1:%%PORT_8083%%;
        underscores_in_headers on;
        location / { proxy_pass http://127.0.0.1:%%PORT_8081%%/echo; }
    }

    server {
        listen 127.0.0.1:%%PORT_8084%%;
        ignore_invalid_headers off;
        location / { proxy_pass http://127.0.0.1:%%PORT_8081%%/echo; }
    }

    server {
        listen 127.0.0.1:%%PORT_8085%%;
        location / { proxy_pass http://127.0.0.1:%%PORT_8081%%/echo; }
    }
}

EOF

mkdir "$d/www";
mkdir "$d/www/dir";
mkdir "$d/www/app";
$t->write_file('www/index.html', "top index\n");
$t->write_file('www/file.txt', "a file\n");
$t->write_file('www/dir/index.html', "dir index\n");
$t->write_file('www/app/static.css', "css\n");

$t->backend(port(8081));
$t->run();

sub body { my ($r) = @_; defined $r && $r =~ /\r\n\r\n(.*)\z/s ? $1 : '' }
sub status { my ($r) = @_; defined $r && $r =~ m!^HTTP/1\.\d (\d+)! ? $1 : 0 }

my $r = http_get('/file.txt');
is(body($r), "a file\n", 'the file itself');
$r = http_get('/dir/');
is(body($r), "dir index\n", '$uri/ found: the directory index');
$r = http_get('/dir');
is(status($r), 301, 'a directory found without its slash redirects');
like($r, qr!Location: http://localhost(:\d+)?/dir/\r\n!, '... to the slash');
$r = http_get('/nothing');
is(status($r), 404, '=404 when nothing exists');

$r = http_get('/app/static.css');
is(body($r), "css\n", 'a file found in a location with a fallback');
$r = http_get('/app/dynamic?q=1');
like(body($r), qr!^\d+ /app/dynamic\z!,
	'fallback: an internal redirect to the proxied URI, without the args');

$r = http(<<EOF, body => 'hello-body');
POST /args/x HTTP/1.0
Host: localhost
Content-Length: 10

EOF
like(body($r), qr!^POST /echo\?from=try HTTP/1\.\d!m, 'fallback keeps the method, takes its own args');
like(body($r), qr/hello-body\z/, '... and the body');
$r = http_get('/keepargs/x?a=1&b=2');
like(body($r), qr!^GET /echo\?a=1&b=2 !m, 'fallback with $args');

is(body(http_get('/named/x')), 'named /named/x', 'fallback: a named location');
is(status(http_get('/missing/x')), 500, 'a missing named location: 500');
is(status(http_get('/cycle/x')), 500, 'a redirect cycle stops: 500');
is(status(http_get('/code/x')), 418, '=code');

is(status(http_get('/backend/echo')), 404, 'an internal location is not reached directly');
like(body(http_get('/rewritten/echo')), qr!^GET /echo !m, '... but through rewrite');

is(status(http_get('/quiet/none')), 404, 'log_not_found off: 404');
is(status(http_get('/loud/none')), 404, 'log_not_found on: 404');

is(body(http_get('/whatever', PeerAddr => '127.0.0.1:' . port(8082))), "top index\n",
	'server-level try_files for a request no location matches (its fallback rewritten by the server\'s rewrite)');
is(body(http_get('/loc/x', PeerAddr => '127.0.0.1:' . port(8082))), 'location',
	'... not inherited by a location');

sub echo_with { my ($port, $header) = @_;
	return body(http("GET / HTTP/1.0\nHost: localhost\n$header\n\n",
		PeerAddr => "127.0.0.1:$port"));
}
like(echo_with(port(8083), 'X_Under: 1'), qr/^X_Under: 1\r?$/mi, 'underscores_in_headers on: passed');
unlike(echo_with(port(8085), 'X_Under: 1'), qr/X_Under/i, 'underscores dropped by default');
like(echo_with(port(8084), 'X_Under: 1'), qr/^X_Under: 1\r?$/mi, 'ignore_invalid_headers off: passed');
# A name a header name cannot hold (not a token): dropped by default, as
# nginx; nginx passes it with ignore_invalid_headers off, sluice refuses
# it (sluice.conf(5)).
my $odd = echo_with(port(8085), "Fo\@o: 1\nX-Ok: 2");
ok($odd =~ /^X-Ok: 2\r?$/mi && $odd !~ /Fo\@o/, 'a name that is not a token dropped by default');
like(http("GET / HTTP/1.0\nHost: localhost\nFo\@o: 1\n\n", PeerAddr => '127.0.0.1:' . port(8084)),
	qr!^HTTP/1\.1 400 !, 'ignore_invalid_headers off: a name that is not a token refused');

$t->stop();
my $log = $t->read_file('error.log');
ok($log =~ m!open\(\) "\Q$d\E/www/loud/none" failed \(2: No such file or directory\)!
	&& $log !~ m!www/quiet/none!, 'log_not_found: the 404 logged only where on');
