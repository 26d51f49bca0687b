#!/usr/bin/perl
#!/usr/bin/perl

# sluice beside nginx (Debian's /usr/sbin/nginx) on gzip: static files of
# types in and out of gzip_types, above and below gzip_min_length, with
# gzip off, a gzip_static file (with and without ranges), and proxied
# answers (gzip_proxied off, any, expired no-cache; an answer already
# encoded, with no-transform, a 404, a 206, chunked, with an ETag or a
# Vary, a 204, a short one, a type in upper case), each asked with a set of
# Accept-Encoding values, by GET and HEAD. The status, the fields but Date,
# Server, Connection and Last-Modified, and the body (its length once
# decompressed) must be the same; how a body is framed is not compared
# (sluice sends a body it read whole with a length, sluice.conf(5),
# proxy_buffering).

use warnings;
use strict;
use Test::More;
use IO::Uncompress::Gunzip qw/gunzip/;
BEGIN { use FindBin; chdir($FindBin::Bin); }
use lib 'lib';
use Test::Sluice qw/:all/;
use Test::Sluice::Grpc qw/nginx_beside beside_table/;
plan(skip_all => 'no nginx') unless -x '/usr/sbin/nginx';

my $t = Test::Sluice->new()->has(qw/http/)->plan(1);
my $d = $t->testdir();
mkdir "$d/www";
$t->write_file('www/big.txt', 'hello world ' x 200);
$t->write_file('www/small.txt', 'hi');
$t->write_file('www/big.html', '<p>x</p>' x 300);
$t->write_file('www/big.json', '{"a":1}' x 300);
$t->write_file('www/pre.txt', 'pre ' x 300);
my %script = (
  '/u1' => "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: 3000\r\n\r\n" . ('a' x 3000),
  '/u2' => "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Encoding: br\r\nContent-Length: 3000\r\n\r\n" . ('a' x 3000),
  '/u3' => "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 3000\r\n\r\n" . ('a' x 3000),
  '/u4' => "HTTP/1.1 404 Not Found\r\nContent-Type: text/html\r\nContent-Length: 3000\r\n\r\n" . ('a' x 3000),
  '/u5' => "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nCache-Control: no-transform\r\nContent-Length: 3000\r\n\r\n" . ('a' x 3000),
  '/u6' => "HTTP/1.1 206 Partial Content\r\nContent-Type: text/html\r\nContent-Range: bytes 0-2999/5000\r\nContent-Length: 3000\r\n\r\n" . ('a' x 3000),
  '/u7' => "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nTransfer-Encoding: chunked\r\n\r\nbb8\r\n" . ('a' x 3000) . "\r\n0\r\n\r\n",
  '/u8' => "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nETag: \"e\"\r\nContent-Length: 3000\r\n\r\n" . ('a' x 3000),
  '/u9' => "HTTP/1.1 200 OK\r\nContent-Type: text/html; charset=utf-8\r\nVary: Accept\r\nContent-Length: 3000\r\n\r\n" . ('a' x 3000),
  '/u10' => "HTTP/1.1 204 No Content\r\nContent-Type: text/html\r\n\r\n",
  '/u11' => "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: 10\r\n\r\naaaaaaaaaa",
  '/u12' => "HTTP/1.1 200 OK\r\nContent-Type: TEXT/HTML\r\nContent-Length: 3000\r\n\r\n" . ('a' x 3000),
);
nginx_beside($t, <<"EOF", %script);
    gzip on;
    gzip_types text/plain application/json;
    gzip_min_length 100;
    gzip_vary on;
    server {
        listen 127.0.0.1:PORT;
        server_name localhost;
        root $d/www;
        location /p/ { proxy_pass http://127.0.0.1:BACKEND/; }
        location /pp/ { proxy_pass http://127.0.0.1:BACKEND/; gzip_proxied any; }
        location /px/ { proxy_pass http://127.0.0.1:BACKEND/; gzip_proxied expired no-cache; }
        location /off/ { gzip off; alias $d/www/; }
        location /st/ { alias $d/www/; gzip_static on; }
    }
EOF
$t->write_file('www/pre.txt.gz', 'not really gzip but bytes');
my @ae = ('Accept-Encoding: gzip', 'Accept-Encoding: gzip;q=0', 'Accept-Encoding: deflate', 'Accept-Encoding: *', 'Accept-Encoding: GZIP', 'Accept-Encoding: br, gzip;q=0.5', 'Accept-Encoding: x-gzip', 'Accept-Encoding: gzip;q=0.000', 'Accept-Encoding: identity');
my @req;
for my $p ('/big.txt', '/small.txt', '/big.html', '/big.json', '/off/big.txt', (map { "/p/u$_" } 1 .. 12), (map { "/pp/u$_" } 1, 3, 4, 7, 8), '/px/u1', '/st/pre.txt') {
  push @req, [$p], map { [$p, $_] } @ae;
}
push @req, ['/st/pre.txt', 'Accept-Encoding: gzip', 'Range: bytes=0-3'], ['/st/pre.txt', 'Range: bytes=0-3'], ['/big.txt', 'Accept-Encoding: gzip', 'HEAD'], ['/big.html', 'HEAD', 'Accept-Encoding: gzip'], ['/p/u7', 'HEAD', 'Accept-Encoding: gzip'], ['/pp/u1', 'Accept-Encoding: gzip', 'Via: 1.1 x'], ['/pp/u1', 'Accept-Encoding: gzip', 'HEAD'], ['/big.txt', 'Accept-Encoding: gzip', 'Range: bytes=0-10'];
my ($diffs, $same) = beside_table(\@req, sub {
  my ($port, $head, $body) = @_;
  my ($code) = $head =~ /^HTTP\/1\.1 (\d{3})/;
  my @f = grep { !/^(Date|Server|Connection|Last-Modified|HTTP|Content-Length|Transfer-Encoding)/i }
    split /\r\n/, $head;
  if ($head =~ /^Transfer-Encoding: chunked/mi) { my $j = ''; while ($body =~ s/^([0-9a-f]+)\r\n//i) { my $n = hex $1; last unless $n; $j .= substr($body, 0, $n, ''); $body =~ s/^\r\n//; } $body = $j; }
  if ($head =~ /^Content-Encoding: gzip/mi && length $body) { my $out; gunzip(\$body => \$out) or $out = 'BADGZIP'; $body = "gz(" . length($out) . ")"; } else { $body = "plain(" . length($body) . ")"; }
  return join(' | ', $code // 'none', sort(@f), $body);
});
is(scalar(@$diffs), 0, scalar(@req) . " requests with gzip: sluice answers as nginx does ($same the same)")
  or diag(join("\n", @$diffs));
