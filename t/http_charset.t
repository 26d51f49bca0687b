#!/usr/bin/perl

# charset, source_charset, charset_types, override_charset (nginx's
# ngx_http_charset_module): the charset added to the Content-Type of the
# listed types, for static and proxied responses; a body recoded from
# source_charset (koi8-r to utf-8, utf-8 to koi8-r with &#N; for what koi8-r
# lacks), whole across many pieces; a proxied response that declares its
# charset kept, or recoded with override_charset on; charset off; a pair
# sluice cannot recode refused at load as nginx refuses one without a map.
# charset_map with the tables nginx ships (/etc/nginx/koi-utf, koi-win from
# nginx-common, included where they are; skipped otherwise): the map, not
# encoding_rs, decides (koi-utf's bullet is U+2022, koi8-r's 0x95 is U+2219;
# a byte it lacks is "?"), both ways; bad and duplicate maps refused.

use warnings;
use strict;

use Test::More;
use Encode qw/encode decode/;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;

my $t = Test::Sluice->new()->has(qw/http/)->plan(28);
my $d = $t->testdir();

my $text = "\x{41f}\x{440}\x{438}\x{432}\x{435}\x{442}, \x{43c}\x{438}\x{440}!\n";   # Привет, мир!
mkdir "$d/koi";
mkdir "$d/utf";
$t->write_file('koi/a.html', encode('koi8-r', $text));
$t->write_file('koi/big.txt', encode('koi8-r', $text x 20000));
$t->write_file('utf/a.html', encode('utf-8', "$text\x{20ac}"));
$t->write_file('utf/a.bin', 'binary');
$t->write_file('utf/a.json', '{}');
$t->write_file('cp/a.html', encode('cp1251', $text)) if mkdir "$d/cp";
my $maps = -r '/etc/nginx/koi-utf' && -r '/etc/nginx/koi-win';
my $include = $maps ? "include /etc/nginx/koi-utf;\n    include /etc/nginx/koi-win;" : '';
mkdir "$d/map";
$t->write_file('map/koi.txt', encode('koi8-r', $text) . "\x95\x81");
$t->write_file('map/utf.txt', encode('utf-8', "$text\x{2022}\x{4c2}"));

$t->write_file_expand('sluice.conf', <<"EOF");

%%TEST_GLOBALS%%

events {
}

http {
    access_log off;
    types { text/html html; text/plain txt; application/json json; }
    default_type application/octet-stream;
    $include

    server {
        listen 127.0.0.1:%%PORT_8080%%;
        charset utf-8;

        location /utf/ { alias $d/utf/; }
        location /off/ { alias $d/utf/; charset off; }
        location /json/ { alias $d/utf/; charset_types application/json; }
        location /star/ { alias $d/utf/; charset_types *; }
        location /koi/ { alias $d/koi/; source_charset koi8-r; }
        location /tokoi/ { alias $d/utf/; charset koi8-r; source_charset utf-8; }
        location /ret { return 200 "text"; }
        location /mapkoi/ { alias $d/map/; source_charset koi8-r; }
        location /maputf/ { alias $d/map/; charset koi8-r; source_charset utf-8; }
        location /mapwin/ { alias $d/map/; charset windows-1251; source_charset koi8-r; }

        location /proxy/ { proxy_pass http://127.0.0.1:%%PORT_8081%%/; }
        location /keep/ { proxy_pass http://127.0.0.1:%%PORT_8081%%/cp/; }
        location /override/ {
            proxy_pass http://127.0.0.1:%%PORT_8081%%/cp/;
            override_charset on;
        }
    }

    server {
        listen 127.0.0.1:%%PORT_8081%%;
        location / { root $d; }
        location /cp/ { alias $d/cp/; charset windows-1251; }
    }
}

EOF

$t->run();

sub ct { $_[0] =~ /^Content-Type: (.*?)\r$/mi ? $1 : '' }
sub body { my ($b) = $_[0] =~ /\r\n\r\n(.*)\z/s; $b // '' }

my $r = http_get('/utf/a.html');
is(ct($r), 'text/html; charset=utf-8', 'charset: added to text/html');
is(body($r), encode('utf-8', "$text\x{20ac}"), 'charset alone: the body as it is');
is(ct(http_get('/utf/a.bin')), 'application/octet-stream', 'charset: not for other types');
is(ct(http_get('/ret')), 'application/octet-stream', 'charset: not for return with default_type application/octet-stream');
is(ct(http_get('/off/a.html')), 'text/html', 'charset off');
is(ct(http_get('/json/a.json')), 'application/json; charset=utf-8', 'charset_types: a listed type');
is(ct(http_get('/json/a.html')), 'text/html; charset=utf-8',
	'charset_types: text/html is always on the list (nginx)');
is(ct(http_get('/star/a.bin')), 'application/octet-stream; charset=utf-8', 'charset_types *');

$r = http_get('/koi/a.html');
is(ct($r), 'text/html; charset=utf-8', 'source_charset: the target charset named');
is(decode('utf-8', body($r)), $text, 'source_charset koi8-r: recoded to utf-8');
unlike($r, qr/^Content-Length:/mi, 'recoded: no Content-Length (it changes)');

$r = http_get('/koi/big.txt', timeout => 20);
is(body($r), encode('utf-8', $text x 20000), 'recoded: a large body whole, across pieces');

$r = http_get('/tokoi/a.html');
is(ct($r), 'text/html; charset=koi8-r', 'utf-8 to koi8-r: named');
# koi8-r lacks the euro sign; nginx's koi-utf map has it as 0x80.
is(body($r), encode('koi8-r', $text) . ($maps ? "\x80" : '&#8364;'),
	'utf-8 to koi8-r: what koi8-r lacks as &#N; (by the map where included)');

is(ct(http_get('/proxy/utf/a.html')), 'text/html; charset=utf-8', 'proxied: charset added');
$r = http_get('/keep/a.html');
is(ct($r), 'text/html; charset=windows-1251', 'proxied with a charset: kept');
is(body($r), encode('cp1251', $text), 'proxied with a charset: body kept');
$r = http_get('/override/a.html');
is(ct($r), 'text/html; charset=utf-8', 'override_charset on: the target charset');
is(decode('utf-8', body($r)), $text, 'override_charset on: recoded from windows-1251');

SKIP: {
	skip 'no /etc/nginx/koi-utf and koi-win (nginx-common)', 4 unless $maps;
	$r = http_get('/mapkoi/koi.txt');
	is(decode('utf-8', body($r)), "$text\x{2022}?", 'charset_map koi8-r utf-8: by the map, "?" for what it lacks');
	$r = http_get('/maputf/utf.txt');
	is(ct($r), 'text/plain; charset=koi8-r', 'charset_map backwards: named');
	is(body($r), encode('koi8-r', $text) . "\x95&#1218;", 'charset_map backwards: by the map, &#N; for what it lacks');
	$r = http_get('/mapwin/koi.txt');
	is(body($r), encode('cp1251', $text) . "\x95?", 'charset_map koi8-r windows-1251 (koi-win)');
}

$t->stop();

# A pair sluice cannot recode: refused at the location's line, in nginx's words.
$t->write_file('bad.conf', "events {}\nhttp {\nserver {\nlocation / {\ncharset utf-8;\nsource_charset x-none;\n}\n}\n}\n");
my ($rc, $out, $err) = $t->run_binary('-p', "$d/", '-c', 'bad.conf', '-e', 'bad.log', '-t');
like($err, qr/^sluice: \[emerg\] no "charset_map" between the charsets "x-none" and "utf-8" in \Q$d\E\/bad\.conf:4$/m,
	'a pair without a recoding: refused at load');

for my $c (["charset_map a utf-8 { 100 41; }", 'invalid value "100"', 3],
	["charset_map a b { 80 E282AC; }", 'invalid value "E282AC"', 3],
	["charset_map a b { 80; }", 'invalid parameters number', 3],
	["charset_map a b { }\ncharset_map B A { }", 'duplicate "charset_map" between "b" and "a"', 4])
{
	my ($conf, $msg, $line) = @$c;
	$t->write_file('bad.conf', "events {}\nhttp {\n$conf\n}\n");
	($rc, $out, $err) = $t->run_binary('-p', "$d/", '-c', 'bad.conf', '-e', 'bad.log', '-t');
	like($err, qr/^sluice: \[emerg\] \Q$msg\E in \Q$d\E\/bad\.conf:$line$/m, "charset_map: $msg");
}
