#!/usr/bin/perl

# The sub module: sub_filter on static files, return texts and proxied
# responses; once on and off, case ignored, several patterns leftmost
# first, variables in the replacement; a match split across an upstream's
# slow pieces still replaced; Content-Length, Last-Modified and ETag gone
# (sub_filter_last_modified on keeps Last-Modified, the ETag weak);
# sub_filter_types; a Content-Encoding response untouched; gzip after
# sub_filter; a Range request gets the whole rewritten file.

use warnings;
use strict;

use Test::More;
use IO::Uncompress::Gunzip qw/gunzip $GunzipError/;
use IO::Socket::INET;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;

my $t = Test::Sluice->new()->has(qw/http proxy sub/)->plan(30);
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
        default_type text/html;

        sub_filter foo bar;

        location / { }
        location /all/ { sub_filter_once off; }
        location /many/ {
            sub_filter_once off;
            sub_filter abcd ONE;
            sub_filter ab TWO;
            sub_filter cd THREE;
        }
        location /var { sub_filter_once off; sub_filter me "$request_method:$uri"; return 200 "call me, Me, ME"; }
        location /p/ { sub_filter_once off; proxy_pass http://127.0.0.1:%%PORT_8081%%/; }
        location /lm/ { sub_filter_last_modified on; proxy_pass http://127.0.0.1:%%PORT_8081%%/; }
        location /types/ { sub_filter_types text/plain; proxy_pass http://127.0.0.1:%%PORT_8081%%/; }
        location /split/ {
            sub_filter_once off;
            sub_filter "hello world" "HI";
            sub_filter "foo" "bar";
            proxy_pass http://127.0.0.1:%%PORT_8081%%/;
        }
        location /gz/ { gzip on; gzip_min_length 1; }
        location /empty/ { }
        location = /t.txt { types { text/plain txt; } }
    }
}

EOF

mkdir "$d/html";
mkdir "$d/html/$_" for qw/all many gz empty/;
$t->write_file('html/index.html', "a foo, a FOO, a fOo\n");
$t->write_file('html/all/index.html', "a foo, a FOO, a fOo\n");
$t->write_file('html/many/index.html', "xabcdx xabx xcdx xabcx xaabcdd\n");
$t->write_file('html/gz/index.html', ("foo " x 100) . "\n");
$t->write_file('html/empty/index.html', "");
$t->write_file('html/t.txt', "foo in text\n");

# The backend: by path, a plain answer, one in small pieces with pauses
# between them (a pattern split across them), a gzip-encoded one.
my $bport = port(8081);
Test::Sluice::_release_ports();
$t->run_daemon(sub {
	my $l = IO::Socket::INET->new(LocalAddr => "127.0.0.1:$bport",
		Listen => 16, ReuseAddr => 1) or die "backend: $!\n";
	open my $fh, '>', "$d/backend.ready"; close $fh;
	while (my $c = $l->accept()) {
		my $req = '';
		while ($req !~ /\r\n\r\n/) {
			sysread($c, $req, 4096, length $req) or last;
		}
		my ($uri) = $req =~ m{^\S+ (\S+)};
		$uri //= '';
		my $head = "HTTP/1.1 200 OK\r\nConnection: close\r\n";
		if ($uri eq '/pieces') {
			syswrite($c, $head . "Content-Type: text/html\r\nTransfer-Encoding: chunked\r\n\r\n");
			for my $p ("say hel", "lo wo", "rld and f", "o", "o, HELLO", " WORLD", " fo") {
				syswrite($c, sprintf("%x\r\n%s\r\n", length $p, $p));
				select(undef, undef, undef, 0.15);
			}
			syswrite($c, "0\r\n\r\n");
		} elsif ($uri eq '/gzip') {
			my $b = "foo pretending to be gzip";
			syswrite($c, $head . "Content-Type: text/html\r\nContent-Encoding: gzip\r\n"
				. "Content-Length: " . length($b) . "\r\n\r\n$b");
		} elsif ($uri eq '/text') {
			my $b = "foo and foo";
			syswrite($c, $head . "Content-Type: text/plain\r\n"
				. "Content-Length: " . length($b) . "\r\n\r\n$b");
		} else {
			my $b = "foo and foo";
			syswrite($c, $head . "Content-Type: text/html; charset=utf-8\r\n"
				. "Last-Modified: Mon, 02 Jan 2023 03:04:05 GMT\r\nETag: \"abc\"\r\n"
				. "Content-Length: " . length($b) . "\r\n\r\n$b");
		}
		close $c;
	}
});
$t->waitforfile("$d/backend.ready");

$t->run();

###############################################################################

sub body {
	my ($r) = @_;
	my ($head, $b) = split /\r\n\r\n/, $r // '', 2;
	$b //= '';
	if ($head =~ /^Transfer-Encoding: chunked/mi) {
		my $out = '';
		while ($b =~ s/^([0-9a-f]+)\r\n//i) {
			my $n = hex $1;
			last if $n == 0;
			$out .= substr($b, 0, $n, '');
			$b =~ s/^\r\n//;
		}
		return $out;
	}
	return $b;
}
sub hdr { $_[0] =~ /^\Q$_[1]\E: (.*?)\r$/mi ? $1 : '' }
sub get11 {
	my ($uri, @h) = @_;
	my $extra = join('', map { "$_\n" } @h);
	return http("GET $uri HTTP/1.1\nHost: localhost\nConnection: close\n$extra\n");
}

my $r = get11('/');
is(body($r), "a bar, a FOO, a fOo\n", 'static: once, the first only');
is(hdr($r, 'Content-Length'), '', 'static: no Content-Length');
is(hdr($r, 'Transfer-Encoding'), 'chunked', 'static: chunked');
is(hdr($r, 'Last-Modified'), '', 'static: no Last-Modified');
is(hdr($r, 'ETag'), '', 'static: no ETag');
$r = http_get('/');
like($r, qr/\r\n\r\na bar, a FOO, a fOo\n$/, 'HTTP/1.0: the body until close');

is(body(get11('/all/')), "a bar, a bar, a bar\n", 'once off: all, case ignored');
is(body(get11('/many/')), "xONEx xTWOx xTHREEx xTWOcx xaONEd\n",
	'several patterns: leftmost, first in order at one place');
is(body(get11('/var')), 'call GET:/var, GET:/var, GET:/var', 'variables in the replacement');

$r = get11('/p/x');
is(body($r), 'bar and bar', 'proxied');
is(hdr($r, 'Content-Length'), '', 'proxied: no Content-Length');
is(hdr($r, 'Last-Modified'), '', 'proxied: no Last-Modified');
is(hdr($r, 'ETag'), '', 'proxied: no ETag');

$r = get11('/lm/x');
is(body($r), 'bar and foo', 'last_modified on: replaced');
is(hdr($r, 'Last-Modified'), 'Mon, 02 Jan 2023 03:04:05 GMT', 'last_modified on: kept');
is(hdr($r, 'ETag'), 'W/"abc"', 'last_modified on: ETag weak');

is(body(get11('/p/text')), 'foo and foo', 'text/plain not in the default types');
$r = get11('/types/text');
is(body($r), 'bar and foo', 'sub_filter_types text/plain');
like(body(get11('/types/x')), qr/^bar/, 'text/html always in the types');
is(body(get11('/t.txt')), "foo in text\n", 'static text/plain untouched');

$r = get11('/p/gzip');
is(body($r), 'foo pretending to be gzip', 'Content-Encoding: untouched');
is(hdr($r, 'Content-Length'), '25', 'Content-Encoding: Content-Length kept');

$r = get11('/split/pieces');
is(body($r), 'say HI and bar, HI fo', 'matches split across slow pieces');

$r = get11('/gz/', 'Accept-Encoding: gzip');
is(hdr($r, 'Content-Encoding'), 'gzip', 'gzip after sub_filter: compressed');
my $raw = body($r);
my $plain;
gunzip(\$raw => \$plain) or diag($GunzipError);
is($plain, "bar " . ("foo " x 99) . "\n", 'gzip after sub_filter: replaced, then compressed');

$r = get11('/', 'Range: bytes=0-3');
like($r, qr{^HTTP/1.1 200 }, 'Range: the whole rewritten file');
is(body($r), "a bar, a FOO, a fOo\n", 'Range: its body');

$r = get11('/empty/');
like($r, qr{^HTTP/1.1 200 }, 'empty file');
is(hdr($r, 'Content-Length'), '0', 'empty file: left alone');

$r = http("HEAD / HTTP/1.1\nHost: localhost\nConnection: close\n\n");
is(body($r), '', 'HEAD: no body');
