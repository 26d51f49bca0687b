#!/usr/bin/perl

# autoindex: a directory without an index file listed in nginx's HTML
# layout (directories first, names cut at 50 bytes with "..>", escaped in
# the link and the text, exact and rounded sizes, UTC and local times),
# dot files left out; XML, JSON and JSONP (a bad callback is 400); off
# still 403; an index file still wins; HEAD has no body.

use warnings;
use strict;

use Test::More;
use POSIX qw/strftime/;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;

my $t = Test::Sluice->new()->has(qw/http autoindex/)->plan(22);
my $d = $t->testdir();

$t->write_file_expand('sluice.conf', <<'EOF');

%%TEST_GLOBALS%%

events {
}

http {
    server {
        listen 127.0.0.1:%%PORT_8080%%;
        server_name localhost;
        root %%TESTDIR%%/html;
        autoindex on;

        location /off/ { autoindex off; }
        location /h/ { alias %%TESTDIR%%/html/list/; autoindex_exact_size off; autoindex_localtime on; }
        location /x/ { alias %%TESTDIR%%/html/list/; autoindex_format xml; }
        location /j/ { alias %%TESTDIR%%/html/list/; autoindex_format json; }
        location /p/ { alias %%TESTDIR%%/html/list/; autoindex_format jsonp; }
    }
}

EOF

my $list = "$d/html/list";
mkdir "$d/html";
mkdir $list;
mkdir "$d/html/off";
mkdir "$d/html/idx";
$t->write_file('html/idx/index.html', 'the index');
$t->write_file('html/list/a.txt', 'abc');
$t->write_file('html/list/big.bin', 'x' x 12000);
$t->write_file('html/list/.hidden', 'secret');
$t->write_file('html/list/' . ('l' x 60) . '.txt', '');
$t->write_file('html/list/x<y>&"z.txt', '');
$t->write_file('html/list/a b#c.txt', '');
mkdir "$list/dir1";
mkdir "$list/" . ('d' x 50);
my $mtime = 1764558147;    # Mon, 01 Dec 2025 03:02:27 GMT
opendir my $dh, $list or die;
utime $mtime, $mtime, map { "$list/$_" } grep { !/^\.\.?$/ } readdir $dh;

$t->run();

my $date = ' 01-Dec-2025 03:02 ';
my $r = http_get('/list/');
like($r, qr/^Content-Type: text\/html\r$/m, 'html type');
like($r, qr{<html>\r\n<head><title>Index of /list/</title></head>\r\n<body>\r\n<h1>Index of /list/</h1><hr><pre><a href="\.\./">\.\./</a>\r\n},
	'html head');
my $d50 = 'd' x 50;
like($r, qr{\n<a href="$d50/">$d50</a>$date {18}-\r\n<a href="dir1/">dir1/</a> {45}$date {18}-\r\n<a href="a%20b%23c.txt">},
	'directories first, a 50-byte name not cut, no slash shown');
like($r, qr{\n<a href="a\.txt">a\.txt</a> {45}$date {18}3\r\n}, 'file line');
like($r, qr{\n<a href="big\.bin">big\.bin</a> {43}$date {14}12000\r\n}, 'exact size');
my ($l60, $l47) = ('l' x 60, 'l' x 47);
like($r, qr{\n<a href="$l60\.txt">$l47\.\.&gt;</a>$date}, 'long name cut');
like($r, qr{\n<a href="x%3Cy%3E%26%22z\.txt">x&lt;y&gt;&amp;&quot;z\.txt</a> {39}$date},
	'name escaped');
unlike($r, qr/hidden/, 'dot file left out');
like($r, qr{</pre><hr></body>\r\n</html>\r\n$}, 'html tail');

$r = http_get('/h/');
my $local = strftime(' %d-%b-%Y %H:%M ', localtime($mtime));
like($r, qr{\n<a href="big\.bin">big\.bin</a> {43}$local    12K\r\n}, 'rounded size, local time');
like($r, qr{\n<a href="dir1/">dir1/</a> {45}$local      -\r\n}, 'rounded directory');

$r = http_get('/x/');
like($r, qr/^Content-Type: text\/xml; charset=utf-8\r$/m, 'xml type');
like($r, qr{\r\n\r\n<\?xml version="1\.0"\?>\r\n<list>\r\n<directory mtime="2025-12-01T03:02:27Z">$d50</directory>\r\n}, 'xml');
like($r, qr{<file mtime="2025-12-01T03:02:27Z" size="3">a\.txt</file>\r\n}, 'xml file');

$r = http_get('/j/');
like($r, qr/^Content-Type: application\/json\r$/m, 'json type');
like($r, qr{\r\n\r\n\[\r\n\{ "name":"$d50", "type":"directory", "mtime":"Mon, 01 Dec 2025 03:02:27 GMT" \},\r\n},
	'json');
like($r, qr{\{ "name":"x<y>&\\"z\.txt", "type":"file", "mtime":"Mon, 01 Dec 2025 03:02:27 GMT", "size":0 \}\r\n\]$},
	'json last entry');

$r = http_get('/p/?callback=cb_1.x');
like($r, qr{^Content-Type: application/javascript\r\n}m, 'jsonp type');
like($r, qr{\r\n\r\n/\* callback \*/\r\ncb_1\.x\(\[\r\n.*\]\);\z}s, 'jsonp');
like(http_get('/p/?callback=a-b'), qr/^HTTP\/1\.1 400 /, 'bad callback');

like(http_get('/off/'), qr/^HTTP\/1\.1 403 /, 'off: forbidden');
like(http_get('/idx/'), qr/the index$/, 'index file wins');
