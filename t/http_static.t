#!/usr/bin/perl

# Static files: root, alias, index, types and default_type, directory
# redirects, 403/404/405 with nginx's error-log lines, Last-Modified, ETag,
# 304 on If-None-Match and If-Modified-Since, HEAD, a large file streamed.

use warnings;
use strict;

use Test::More;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;

my $t = Test::Sluice->new()->has(qw/http/)->plan(25);
my $d = $t->testdir();

$t->write_file_expand('sluice.conf', <<'EOF');

%%TEST_GLOBALS%%

events {
}

http {
    access_log off;
    types { text/html html; text/css css; image/png png; }
    default_type application/octet-stream;

    server {
        listen 127.0.0.1:%%PORT_8080%%;
        root %%TESTDIR%%/www;

        location /alias/ { alias %%TESTDIR%%/other/; }
        location /idx/ { index first.html second.html; }
        location /noindex/ { }
        location /noetag/ { alias %%TESTDIR%%/www/; etag off; }
    }
}

EOF

mkdir("$d/www");
mkdir("$d/www/dir");
mkdir("$d/www/idx");
mkdir("$d/www/noindex");
mkdir("$d/other");
$t->write_file('www/index.html', 'the index');
$t->write_file('www/style.css', 'body{}');
$t->write_file('www/data.bin', 'bytes');
$t->write_file('www/PIC.PNG', 'png');
$t->write_file('www/idx/second.html', 'second');
$t->write_file('www/secret.html', 'no');
chmod(0000, "$d/www/secret.html");
$t->write_file('other/file.txt', 'aliased');
$t->write_file('www/big.bin', 'x' x 1_000_000);

$t->run();

my $r = http_get('/');
like($r, qr!^HTTP/1\.1 200 OK\r\n.*Content-Type: text/html\r\n.*\r\n\r\nthe index$!s, 'index.html');
like(http_get('/style.css'), qr!Content-Type: text/css\r\n.*body\{\}$!s, 'type by extension');
like(http_get('/PIC.PNG'), qr!Content-Type: image/png\r\n!, 'extension matched without case');
like(http_get('/data.bin'), qr!Content-Type: application/octet-stream\r\n!, 'default_type');
like(http_get('/alias/file.txt'), qr!\r\n\r\naliased$!, 'alias');
like(http_get('/idx/'), qr!\r\n\r\nsecond$!, 'index list in order');
like(http_get('/dir?a=1'), qr!^HTTP/1\.1 301 .*Location: http://localhost:\d+/dir/\?a=1\r\n!s,
	'directory redirected to its slash');
like(http_get('/noindex/'), qr!^HTTP/1\.1 403 Forbidden!, 'directory without index: 403');
like(http_get('/missing'), qr!^HTTP/1\.1 404 Not Found!, 'missing: 404');
# Mode 000: unreadable for the workers (root's workers run as nobody).
like(http_get('/secret.html'), qr!^HTTP/1\.1 403 Forbidden!, 'unreadable: 403');
like(http("POST /index.html HTTP/1.0\nHost: localhost\nContent-Length: 0\n\n"), qr!^HTTP/1\.1 405 Not Allowed!, 'POST: 405');

$r = http_get('/style.css');
my ($etag) = $r =~ /^ETag: (\S+)\r$/m;
my ($lm) = $r =~ /^Last-Modified: (.+)\r$/m;
ok($etag && $lm, 'ETag and Last-Modified, spelled as nginx spells them');
like(http("GET /style.css HTTP/1.0\nHost: localhost\nIf-None-Match: $etag\n\n"), qr!^HTTP/1\.1 304 Not Modified!, 'If-None-Match: 304');
like(http("GET /style.css HTTP/1.0\nHost: localhost\nIf-Modified-Since: $lm\n\n"), qr!^HTTP/1\.1 304 !, 'If-Modified-Since: 304');
like(http("HEAD /style.css HTTP/1.0\nHost: localhost\n\n"), qr!Content-Length: 6\r\n.*\r\n\r\n$!s, 'HEAD: length, no body');

$r = http_get('/big.bin');
my ($body) = $r =~ /\r\n\r\n(.*)$/s;
is(length($body // ''), 1_000_000, 'large file streamed whole');

sub range {
	my ($uri, $spec) = @_;
	return http("GET $uri HTTP/1.0\nHost: localhost\nRange: $spec\n\n");
}
like(range('/index.html', 'bytes=4-8'), qr!^HTTP/1\.1 206 Partial Content\r\n.*Content-Range: bytes 4-8/9\r\n.*\r\n\r\nindex$!s, 'byte range');
like(range('/index.html', 'bytes=-5'), qr!Content-Range: bytes 4-8/9\r\n.*\r\n\r\nindex$!s, 'suffix range');
like(range('/index.html', 'bytes=20-'), qr!^HTTP/1\.1 416 .*Content-Range: bytes \*/9\r\n!s, 'unsatisfiable: 416');
like(range('/big.bin', 'bytes=999990-'), qr!Content-Length: 10\r\n.*\r\n\r\nx{10}$!s, 'range of a streamed file');
like(http_get('/index.html'), qr!^Accept-Ranges: bytes\r$!mi, 'Accept-Ranges');

# etag off: no ETag, and If-None-Match is not looked at.
my ($tag) = http_get('/index.html') =~ /^ETag: (\S+)\r$/mi;
$r = http_get('/noetag/index.html');
unlike($r, qr/^ETag:/mi, 'etag off: no ETag');
like($r, qr/^Last-Modified:/mi, '... Last-Modified still');
like(http("GET /noetag/index.html HTTP/1.0\nHost: localhost\nIf-None-Match: $tag\n\n"),
	qr!^HTTP/1\.1 200 !, '... If-None-Match ignored');

my $log = $t->read_file('error.log');
like($log, qr!\[error\] .*open\(\) "\Q$d\E/www/missing" failed \(2: No such file or directory\), client: 127\.0\.0\.1, server: , request: "GET /missing HTTP/1\.0", host: "localhost"!,
	'404 logged as nginx does');
