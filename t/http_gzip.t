#!/usr/bin/perl

# The gzip module: static files, return texts and proxied responses
# compressed for a client whose Accept-Encoding takes gzip (not q=0), with
# Content-Length gone, a weak ETag and Vary with gzip_vary; not for HEAD,
# 304, small bodies (gzip_min_length), other types (gzip_types), HTTP/1.0
# (gzip_http_version), gzip_disable, responses already encoded; byte ranges
# give way to compression as in nginx. gzip_proxied judged from Via and the
# upstream's Expires, Cache-Control, Last-Modified, ETag and the request's
# Authorization. A slow chunked upstream's first piece reaches the client
# before the rest is sent. gzip_static on and always. $gzip_ratio.

use warnings;
use strict;

use Test::More;
use IO::Compress::Gzip qw/gzip $GzipError/;
use IO::Uncompress::Gunzip qw/gunzip $GunzipError/;
use Compress::Raw::Zlib;
use IO::Socket::INET;
use IO::Select;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;

my $t = Test::Sluice->new()->has(qw/http gzip proxy/)->plan(66);
my $d = $t->testdir();

$t->write_file_expand('sluice.conf', <<'EOF');

%%TEST_GLOBALS%%

events {
}

http {
    log_format g '$uri $gzip_ratio';
    access_log %%TESTDIR%%/gz.log g;

    server {
        listen 127.0.0.1:%%PORT_8080%%;
        server_name localhost;
        root %%TESTDIR%%/html;

        gzip on;
        gzip_vary on;

        location / { }
        location /min/ { gzip_min_length 1000; }
        location /types/ { gzip_types text/plain; }
        location /all/ { gzip_types *; }
        location /off/ { gzip off; }
        location /v10/ { gzip_http_version 1.0; }
        location /novary/ { gzip_vary off; }
        location /disable/ { gzip_disable msie6 "^BadBot"; }
        location /ret { gzip_types text/plain; return 200 "$request_uri $request_uri $request_uri $request_uri"; }

        location /p/ { proxy_pass http://127.0.0.1:%%PORT_8081%%/; }
        location /expired/ { gzip_proxied expired; proxy_pass http://127.0.0.1:%%PORT_8081%%/; }
        location /nocache/ { gzip_proxied no-cache no-store private; proxy_pass http://127.0.0.1:%%PORT_8081%%/; }
        location /nolm/ { gzip_proxied no_last_modified no_etag; proxy_pass http://127.0.0.1:%%PORT_8081%%/; }
        location /auth/ { gzip_proxied auth; proxy_pass http://127.0.0.1:%%PORT_8081%%/; }
        location /any/ { gzip_proxied any; proxy_pass http://127.0.0.1:%%PORT_8081%%/; }
        location /slow { proxy_pass http://127.0.0.1:%%PORT_8082%%; proxy_buffering off; }

        location /gs/ { gzip_static on; }
        location /gsa/ { gzip_static always; gzip off; }
    }
}

EOF

my $text = join('', map { "line $_ of a text that compresses well\n" } 1 .. 400);
mkdir "$d/html";
for my $dir (qw/min types all off v10 novary disable gs gsa/) {
	mkdir "$d/html/$dir";
}
$t->write_file("html/index.html", $text);
$t->write_file("html/small.html", "0123456789");
$t->write_file("html/file.txt", $text);
$t->write_file("html/pic.gif", $text);
$t->write_file("html/$_/index.html", $text) for qw/min off v10 novary disable/;
$t->write_file("html/min/small.html", "x" x 500);
$t->write_file("html/types/file.txt", $text);
$t->write_file("html/all/pic.gif", $text);
$t->write_file("html/$_/page.html", "plain page\n" x 50) for qw/gs gsa/;
for my $dir (qw/gs gsa/) {
	gzip(\"precompressed page\n", "$d/html/$dir/page.html.gz") or die $GzipError;
}
$t->write_file("html/gs/only.html", "no gz beside\n" x 50);

my $body = "proxied body that is long enough to compress, " x 20;
my $len = length $body;
my $past = 'Thu, 01 Jan 1970 00:00:01 GMT';
my $future = 'Fri, 01 Jan 2100 00:00:00 GMT';
my $resp = sub {
	my (@h) = @_;
	return join("\r\n", 'HTTP/1.1 200 OK', 'Content-Type: text/html',
		"Content-Length: $len", @h, '', '') . $body;
};
my %script = (
	'/plain' => $resp->(),
	'/expired' => $resp->("Expires: $past"),
	'/fresh' => $resp->("Expires: $future"),
	'/nocache' => $resp->('Cache-Control: no-cache'),
	'/private' => $resp->('Cache-Control: max-age=0, private'),
	'/maxage' => $resp->('Cache-Control: max-age=60'),
	'/lm' => $resp->("Last-Modified: $past"),
	'/etag' => $resp->('ETag: "abc"'),
	'/encoded' => $resp->('Content-Encoding: br'),
	'/chunked' => "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nTransfer-Encoding: chunked\r\n\r\n"
		. sprintf("%x\r\n%s\r\n0\r\n\r\n", $len, $body),
);
$t->raw_backend(port(8081), %script);

# The slow upstream: the first piece, then the rest only once the test has
# seen the first piece arrive (the file "go").
$t->run_daemon(sub {
	my $l = IO::Socket::INET->new(LocalAddr => '127.0.0.1:' . port(8082),
		Listen => 5, ReuseAddr => 1) or die "slow: $!\n";
	open my $fh, '>', "$d/slow.ready"; close $fh;
	my $c = $l->accept() or return;
	my $req = '';
	while ($req !~ /\r\n\r\n/) {
		sysread($c, $req, 4096, length $req) or return;
	}
	my $first = "FIRST PIECE " x 10;
	syswrite($c, "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nTransfer-Encoding: chunked\r\n\r\n"
		. sprintf("%x\r\n%s\r\n", length $first, $first));
	for (1 .. 100) {
		last if -e "$d/go";
		select(undef, undef, undef, 0.1);
	}
	my $rest = "REST " x 10;
	syswrite($c, sprintf("%x\r\n%s\r\n0\r\n\r\n", length $rest, $rest));
	sleep 1;
});
$t->waitforfile("$d/slow.ready");

$t->run();

###############################################################################

sub get {
	my ($uri, @h) = @_;
	my $extra = join('', map { "$_\n" } @h);
	return http(<<EOF);
GET $uri HTTP/1.1
Host: localhost
Connection: close
$extra
EOF
}

sub gz { get($_[0], 'Accept-Encoding: gzip, deflate', @_[1 .. $#_]) }

sub body {
	my ($r) = @_;
	my ($head, $b) = split /\r\n\r\n/, $r, 2;
	return '' unless defined $b;
	return $head =~ /^Transfer-Encoding: chunked/mi ? dechunk($b) : $b;
}

sub gunzipped {
	my ($r) = @_;
	my $in = body($r);
	my $out;
	gunzip(\$in, \$out) or return "gunzip failed: $GunzipError";
	return $out;
}

sub ce { $_[0] =~ /^Content-Encoding: (.*?)\r$/mi ? $1 : '' }
sub hdr { $_[0] =~ /^\Q$_[1]\E: (.*?)\r$/mi ? $1 : '' }

# Static files.

my $r = gz('/index.html');
is(ce($r), 'gzip', 'static: gzip');
is(gunzipped($r), $text, 'static: gunzips to the file');
unlike($r, qr/^Content-Length/mi, 'static: no Content-Length');
like($r, qr/^Transfer-Encoding: chunked/mi, 'static: chunked');
is(hdr($r, 'Vary'), 'Accept-Encoding', 'static: Vary');
like(hdr($r, 'ETag'), qr{^W/"}, 'static: weak ETag');
unlike($r, qr/^Accept-Ranges/mi, 'static: no Accept-Ranges');

$r = get('/index.html');
is(ce($r), '', 'no Accept-Encoding: plain');
is(hdr($r, 'Content-Length'), length $text, 'no Accept-Encoding: length');
is(hdr($r, 'Vary'), 'Accept-Encoding', 'no Accept-Encoding: Vary still');
unlike(hdr($r, 'ETag'), qr{^W/}, 'no Accept-Encoding: strong ETag');

is(ce(get('/index.html', 'Accept-Encoding: gzip;q=0')), '', 'q=0 refuses');
is(ce(get('/index.html', 'Accept-Encoding: deflate, x-gzip')), '', 'x-gzip is not gzip');
is(ce(get('/index.html', 'Accept-Encoding: br;q=1.0, gzip;q=0.5')), 'gzip', 'q=0.5');

$r = gz('/small.html');
is(ce($r), '', 'shorter than gzip_min_length 20');
is(hdr($r, 'Vary'), '', 'too short: no Vary');
is(ce(gz('/min/index.html')), 'gzip', 'gzip_min_length 1000: long file');
is(ce(gz('/min/small.html')), '', 'gzip_min_length 1000: 500 bytes');

is(ce(gz('/file.txt')), '', 'text/plain not in default gzip_types');
is(ce(gz('/pic.gif')), '', 'image/gif not compressed');
is(ce(gz('/types/file.txt')), 'gzip', 'gzip_types text/plain');
is(ce(gz('/all/pic.gif')), 'gzip', 'gzip_types *');
is(ce(gz('/off/index.html')), '', 'gzip off');

$r = http(<<EOF);
HEAD /index.html HTTP/1.1
Host: localhost
Accept-Encoding: gzip
Connection: close

EOF
# A HEAD gets the fields its GET would, as nginx's gzip header filter
# gives them (checked beside nginx: t/http_nginx_gzip_differential.t).
is(ce($r), 'gzip', 'HEAD: the fields of a compressed answer');
is(hdr($r, 'Content-Length'), '', 'HEAD: no length, as the compressed GET');

my $etag = hdr(gz('/index.html'), 'ETag');
$r = gz('/index.html', "If-None-Match: $etag");
like($r, qr/^HTTP\/1.1 304/, '304 for the weak ETag');
is(ce($r), '', '304: no Content-Encoding');

$r = gz('/index.html', 'Range: bytes=0-9');
like($r, qr/^HTTP\/1.1 200/, 'range with gzip: whole 200');
is(gunzipped($r), $text, 'range with gzip: whole file');
like(get('/index.html', 'Range: bytes=0-9'), qr/^HTTP\/1.1 206/, 'range without gzip: 206');

$r = http(<<EOF);
GET /index.html HTTP/1.0
Host: localhost
Accept-Encoding: gzip

EOF
is(ce($r), '', 'HTTP/1.0: below gzip_http_version 1.1');
$r = http(<<EOF);
GET /v10/index.html HTTP/1.0
Host: localhost
Accept-Encoding: gzip

EOF
is(ce($r), 'gzip', 'gzip_http_version 1.0');
is(gunzipped($r), $text, 'HTTP/1.0: body until close');

is(hdr(get('/novary/index.html'), 'Vary'), '', 'gzip_vary off');

is(ce(gz('/disable/index.html', 'User-Agent: Mozilla/4.0 (compatible; MSIE 6.0; Windows NT 5.0)')),
	'', 'gzip_disable msie6');
is(ce(gz('/disable/index.html', 'User-Agent: Mozilla/4.0 (compatible; MSIE 6.0; Windows NT 5.1; SV1)')),
	'gzip', 'msie6 with SV1 compressed');
is(ce(gz('/disable/index.html', 'User-Agent: badbot/1')), '', 'gzip_disable regex, case ignored');

$r = gz('/ret');
is(gunzipped($r), "/ret /ret /ret /ret", 'return text compressed');

# Proxied.

$r = gz('/p/plain');
is(ce($r), 'gzip', 'proxied: gzip');
is(gunzipped($r), $body, 'proxied: body');
is(gunzipped(gz('/p/chunked')), $body, 'proxied chunked: body');
is(ce(gz('/p/plain', 'Via: 1.1 cache')), '', 'Via, gzip_proxied off: plain');
$r = gz('/p/encoded');
is(ce($r), 'br', 'already encoded: left alone');
is(body($r), $body, 'already encoded: body as sent');

is(ce(gz('/expired/expired', 'Via: 1.1 c')), 'gzip', 'expired: past Expires');
is(ce(gz('/expired/fresh', 'Via: 1.1 c')), '', 'expired: future Expires');
is(ce(gz('/nocache/nocache', 'Via: 1.1 c')), 'gzip', 'no-cache');
is(ce(gz('/nocache/private', 'Via: 1.1 c')), 'gzip', 'private');
is(ce(gz('/nocache/maxage', 'Via: 1.1 c')), '', 'Cache-Control without them');
is(ce(gz('/nolm/plain', 'Via: 1.1 c')), 'gzip', 'no_last_modified: none');
is(ce(gz('/nolm/lm', 'Via: 1.1 c')), '', 'no_last_modified: Last-Modified');
is(ce(gz('/nolm/etag', 'Via: 1.1 c')), '', 'no_etag: ETag');
is(ce(gz('/auth/maxage', 'Via: 1.1 c', 'Authorization: Basic eDp5')), 'gzip', 'auth: Authorization');
is(ce(gz('/auth/maxage', 'Via: 1.1 c')), '', 'auth: none');
is(ce(gz('/any/maxage', 'Via: 1.1 c')), 'gzip', 'any');

# A slow upstream: its first piece comes through compressed before the rest.

my $s = http("GET /slow HTTP/1.1\nHost: localhost\nAccept-Encoding: gzip\nConnection: close\n\n",
	start => 1);
my ($buf, $seen) = ('', '');
my $sel = IO::Select->new($s);
my $deadline = time() + 5;
while (time() < $deadline && $seen !~ /FIRST PIECE/) {
	last unless $sel->can_read(1);
	sysread($s, $buf, 65536, length $buf) or last;
	my ($head, $b) = split /\r\n\r\n/, $buf, 2;
	next unless defined $b;
	my $raw = '';
	while ($b =~ s/^([0-9a-f]+)\r\n//i) {
		my $n = hex $1;
		last if $n == 0 || length $b < $n;
		$raw .= substr($b, 0, $n, '');
		$b =~ s/^\r\n//;
	}
	my ($inf) = Compress::Raw::Zlib::Inflate->new(-WindowBits => WANT_GZIP);
	my $out = '';
	$inf->inflate($raw, $out);
	$seen = $out;
}
like($seen, qr/FIRST PIECE/, 'slow upstream: first piece flushed') or diag(length($buf) . " [$buf]");
$t->write_file('go', '');
$buf .= http_end($s);
like(gunzipped($buf), qr/^(FIRST PIECE ){10}(REST ){10}$/, 'slow upstream: whole body');

# gzip_static.

$r = gz('/gs/page.html');
is(gunzipped($r), "precompressed page\n", 'gzip_static on: the .gz');
is(hdr($r, 'Content-Length'), -s "$d/html/gs/page.html.gz", 'gzip_static: its length');
is(hdr($r, 'Content-Type'), 'text/html', 'gzip_static: the type of the file');
is(hdr($r, 'Vary'), 'Accept-Encoding', 'gzip_static: Vary');
$r = get('/gs/page.html');
is(body($r), "plain page\n" x 50, 'gzip_static on, no gzip: the file');
is(ce(get('/gsa/page.html')), 'gzip', 'gzip_static always: the .gz without gzip');
is(gunzipped(gz('/gs/only.html')), "no gz beside\n" x 50, 'gzip_static without .gz: the file, gzipped');

# $gzip_ratio.

my $log = '';
poll_until(sub { $log = $t->read_file('gz.log'); $log =~ m{^/gs/only.html }m }, 5);
like($log, qr{^/index.html \d+\.\d\d$}m, '$gzip_ratio');
like($log, qr{^/small.html -$}m, '$gzip_ratio uncompressed: -');

###############################################################################
