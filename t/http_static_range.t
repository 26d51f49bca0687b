#!/usr/bin/perl

# Byte ranges of static files, as nginx's range filter serves them: one
# range (206, Content-Range), several (multipart/byteranges, each part with
# its Content-Type and Content-Range, boundary of 20 digits), 416 with
# "Content-Range: bytes */SIZE" for bad syntax or nothing satisfiable, the
# whole file for another unit, ranges larger in sum than the file, more
# ranges than max_ranges, or an If-Range naming another version; max_ranges 0
# turns ranges off (no Accept-Ranges). Statuses, headers and exact bodies.

use warnings;
use strict;

use Test::More;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;

my $t = Test::Sluice->new()->has(qw/http/)->plan(43);

$t->write_file_expand('sluice.conf', <<'EOF');

%%TEST_GLOBALS%%

events {
}

http {
    access_log off;
    types { text/html html; }
    default_type application/octet-stream;

    server {
        listen 127.0.0.1:%%PORT_8080%%;
        root %%TESTDIR%%;

        location /two/ { max_ranges 2; alias %%TESTDIR%%/; }
        location /none/ { max_ranges 0; alias %%TESTDIR%%/; }
    }
}

EOF

# nginx-tests' range.t file: 100 lines of "X%03dXXXXXX", 1000 bytes.
my $t1 = join('', map { sprintf "X%03dXXXXXX", $_ } (0 .. 99));
$t->write_file('t1.html', $t1);
# Over 256 KiB: streamed from the file rather than read at once.
my $big = join('', map { sprintf "%08d", $_ } (0 .. 39999));
$t->write_file('big.bin', $big);
$t->write_file('empty.html', '');

$t->run();

sub get {
	my ($uri, @headers) = @_;
	my $h = join('', map { "$_\n" } @headers);
	return http("GET $uri HTTP/1.0\nHost: localhost\n$h\n");
}

sub range { get($_[0], "Range: $_[1]") }

sub body { my ($r) = @_; $r =~ /\r\n\r\n(.*)\z/s ? $1 : undef }
sub status { my ($r) = @_; $r =~ m!^HTTP/1\.1 (\d+)! ? $1 : 0 }
sub header {
	my ($r, $n) = @_;
	my ($head) = split /\r\n\r\n/, $r, 2;
	return $head =~ /^\Q$n\E: ([^\r]*)\r?$/mi ? $1 : undef;
}

# The multipart body nginx sends for these parts of a file.
sub multipart {
	my ($boundary, $type, $file, @spans) = @_;
	my $size = length $file;
	my $b = '';
	for my $s (@spans) {
		my ($from, $to) = @$s;
		$b .= "\r\n--$boundary\r\n";
		$b .= "Content-Type: $type\r\n" if defined $type;
		$b .= "Content-Range: bytes $from-$to/$size\r\n\r\n";
		$b .= substr($file, $from, $to - $from + 1);
	}
	return $b . "\r\n--$boundary--\r\n";
}

###############################################################################

my $r = range('/t1.html', 'bytes=0-8');
is(status($r), 206, 'single range: 206');
is(header($r, 'Content-Range'), 'bytes 0-8/1000', 'single range: Content-Range');
is(header($r, 'Content-Length'), 9, 'single range: Content-Length');
is(body($r), 'X000XXXXX', 'single range: body');
is(header($r, 'Accept-Ranges'), undef, 'no Accept-Ranges on 206, as nginx');

$r = range('/t1.html', 'bytes=-10');
is(header($r, 'Content-Range') . ' ' . body($r), 'bytes 990-999/1000 X099XXXXXX', 'suffix range');
$r = range('/t1.html', 'bytes=990-');
is(header($r, 'Content-Range') . ' ' . body($r), 'bytes 990-999/1000 X099XXXXXX', 'open range');
$r = range('/t1.html', 'bytes=990-1990');
is(header($r, 'Content-Range') . ' ' . body($r), 'bytes 990-999/1000 X099XXXXXX', 'last byte past the end');
$r = range('/t1.html', 'bytes=  10 -  19 ');
is(header($r, 'Content-Range') . ' ' . body($r), 'bytes 10-19/1000 X001XXXXXX', 'spaces around numbers');

$r = range('/t1.html', 'bytes=0-9, -10, 10-19');
is(status($r), 206, 'multipart: 206');
my ($boundary) = (header($r, 'Content-Type') // '') =~ /^multipart\/byteranges; boundary=(\d{20})$/;
ok($boundary, 'multipart: Content-Type with a 20-digit boundary');
$boundary //= 'none';
my $want = multipart($boundary, 'text/html', $t1, [0, 9], [990, 999], [10, 19]);
is(body($r), $want, 'multipart: body exactly as nginx lays it out');
is(header($r, 'Content-Length'), length($want), 'multipart: Content-Length is what is sent');
is(header($r, 'Content-Range'), undef, 'multipart: no Content-Range on the whole');

$r = range('/t1.html', 'bytes=0-9, -10, 100000-, 10-19');
($boundary) = (header($r, 'Content-Type') // '') =~ /boundary=(\d+)/;
is(body($r), multipart($boundary // '', 'text/html', $t1, [0, 9], [990, 999], [10, 19]),
	'multipart: a range past the end is left out');

$r = range('/t1.html', 'bytes=0-4,2-6');
($boundary) = (header($r, 'Content-Type') // '') =~ /boundary=(\d+)/;
is(body($r), multipart($boundary // '', 'text/html', $t1, [0, 4], [2, 6]),
	'overlapping ranges served as asked');

$r = range('/big.bin', 'bytes=0-1,300000-300009,-5');
($boundary) = (header($r, 'Content-Type') // '') =~ /boundary=(\d+)/;
$want = multipart($boundary // '', 'application/octet-stream', $big, [0, 1], [300000, 300009], [319995, 319999]);
is(body($r), $want, 'multipart of a streamed file');
is(header($r, 'Content-Length'), length($want), 'multipart of a streamed file: Content-Length');
$r = range('/big.bin', 'bytes=100-299999');
is(length(body($r)) . ' ' . substr(body($r), 0, 12), '299900 001200000013', 'large single range streamed');

for my $spec ('bytes=100000-', 'bytes=1000-', 'bytes=alpha', 'bytes=10-alpha', 'bytes=10',
	'bytes=10-11 12-', 'bytes=5-2')
{
	$r = range('/t1.html', $spec);
	is(status($r) . ' ' . (header($r, 'Content-Range') // ''), '416 bytes */1000', "416: $spec");
}

$r = range('/t1.html', 'bytes=0-10001, 0-0');
is(status($r) . ' ' . length(body($r)), '200 1000', 'ranges larger in sum than the file: whole');
is(header($r, 'Accept-Ranges'), 'bytes', 'whole: Accept-Ranges');
$r = range('/t1.html', 'items=0-1');
is(status($r) . ' ' . length(body($r)), '200 1000', 'another unit: whole');

$r = range('/two/t1.html', 'bytes=0-9, -10');
is(status($r), 206, 'max_ranges not reached');
$r = range('/two/t1.html', 'bytes=0-9, -10, 10000-');
is(status($r), 206, 'max_ranges not reached with a range past the end');
$r = range('/two/t1.html', 'bytes=0-9, -10, 10-19');
is(status($r) . ' ' . body($r), "200 $t1", 'max_ranges passed: whole');
$r = range('/none/t1.html', 'bytes=0-9');
is(status($r) . ' ' . length(body($r)), '200 1000', 'max_ranges 0: whole');
is(header($r, 'Accept-Ranges'), undef, 'max_ranges 0: no Accept-Ranges');

$r = http_get('/t1.html');
my $etag = header($r, 'ETag');
my $lm = header($r, 'Last-Modified');
$r = get('/t1.html', 'Range: bytes=0-3', "If-Range: $etag");
is(status($r) . ' ' . body($r), '206 X000', 'If-Range with the ETag');
$r = get('/t1.html', 'Range: bytes=0-3', 'If-Range: "other"');
is(status($r) . ' ' . length(body($r)), '200 1000', 'If-Range with another ETag: whole');
$r = get('/t1.html', 'Range: bytes=0-3', "If-Range: W/$etag");
is(status($r), 200, 'If-Range with a weak ETag: whole');
$r = get('/t1.html', 'Range: bytes=0-3', "If-Range: $lm");
is(status($r) . ' ' . body($r), '206 X000', 'If-Range with the Last-Modified date');
$r = get('/t1.html', 'Range: bytes=0-3', 'If-Range: Thu, 01 Jan 1970 00:00:01 GMT');
is(status($r), 200, 'If-Range with another date: whole');

$r = http("HEAD /t1.html HTTP/1.0\nHost: localhost\nRange: bytes=0-8\n\n");
is(status($r) . ' ' . header($r, 'Content-Length') . ' ' . length(body($r)), '206 9 0', 'HEAD: 206 head, no body');
$r = http("POST /t1.html HTTP/1.0\nHost: localhost\nRange: bytes=0-8\nContent-Length: 0\n\n");
is(status($r), 405, 'POST with a range: 405');

$r = range('/empty.html', 'bytes=0-');
is(status($r) . ' ' . header($r, 'Content-Length'), '200 0', 'empty file, range from 0: whole');
$r = range('/empty.html', 'bytes=1-');
is(status($r) . ' ' . (header($r, 'Content-Range') // ''), '416 bytes */0', 'empty file, range from 1: 416');

###############################################################################
