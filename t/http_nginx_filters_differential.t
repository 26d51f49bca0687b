#!/usr/bin/perl

# sluice beside nginx (Debian's /usr/sbin/nginx) on what the filters make
# of an upstream's answer: proxy_cookie_domain and proxy_cookie_path (plain
# and regex rules, named captures, odd spacing, quotes, two lines),
# proxy_cookie_flags (by name and by regex; added, kept, made another value,
# taken away), sub_filter (once and not, several patterns, variables,
# types, bodies that end inside a possible match, a body in 7-byte chunks)
# and charset (charset_types, source_charset with override_charset). Each
# answer goes to both; the status, the Set-Cookie, Content-Type,
# Last-Modified and ETag fields and the body (chunks joined) must be the
# same. Left out: the framing (sluice sends a body it read whole with a
# length, nginx a filtered one chunked), as sluice.conf(5) says.

use warnings;
use strict;

use Test::More;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;
use Test::Sluice::Grpc qw/nginx_beside beside_table/;

plan(skip_all => 'no nginx') unless -x '/usr/sbin/nginx';

my $t = Test::Sluice->new()->has(qw/http/)->plan(1);

my @cookies = (
	'a=1; Domain=example.org; Path=/app/x', 'a=1; domain=.example.org; path=/app/',
	'a=1; Domain=EXAMPLE.ORG', 'a=1; Path=/other/', 'a=1', 'a=1;Domain=example.org;Path=/app/y',
	'a=1; Max-Age=10; Secure; HttpOnly; Path=/app/', 'a=b; domain=sub.example.org',
	'a="x;domain=example.org"; path=/app/', 'a=1; Domain=example.org; Domain=example.org',
	'a=1; Path=/app', 'a=1; path=/APP/z', 'a=1; Domain=; Path=', 'a=1; Domain = example.org',
	'xdomain=example.org; path=/app/', 'a=1; Expires=Thu, 01 Jan 2099 00:00:00 GMT; Path=/app/q',
	'a=1; Domain=example.org.evil; Path=/application',
	'SID=1; Path=/', 'sid=1;secure; samesite=none;HTTPONLY', 'tok=1; Secure; SameSite=Lax; Path=/',
	'other=1', 'sid', 'tok=2; samesite=Strict; secure; httponly', 'A=1; SameSite=LAX',
	'sid=1; ; x', 'sid=1;', 'tok=1; nosecure',
);
my @bodies = (
	'foo bar foo', 'FOO Foo', 'xfoofoox', '', 'fo', 'ofoo', 'foofoofoo', 'a<b>foo</b>',
	'foo' x 3000, 'f' . ('o' x 5000), 'abc host def', 'no match here', 'fox', 'hos', 'hoo', 'fofoo', 'xho', 'fofo', 'o'
);
my %script;
for my $i (0 .. $#cookies) {
	$script{"/ck$_/$i"} = "HTTP/1.1 200 OK\r\nSet-Cookie: $cookies[$i]\r\nContent-Length: 2\r\n\r\nok"
		for '', 'r', 'f', 'fc';
}
$script{'/ck/two'} = $script{'/ckr/two'} = "HTTP/1.1 200 OK\r\nSet-Cookie: a=1; Domain=example.org\r\n"
	. "Set-Cookie: b=2; Path=/app/\r\nContent-Length: 2\r\n\r\nok";
for my $i (0 .. $#bodies) {
	my $b = $bodies[$i];
	for my $type ('text/html', 'text/plain', 'text/html; charset=koi8-r', 'application/json') {
		(my $k = $type) =~ s/\W//g;
		my $len = length $b;
		for my $loc (qw/sf sfo sfm sft cs csu/) {
			$script{"/$loc/$i/$k"} = "HTTP/1.1 200 OK\r\nContent-Type: $type\r\n"
				. "Last-Modified: Thu, 01 Jan 1970 00:00:01 GMT\r\nETag: \"e\"\r\n"
				. "Content-Length: $len\r\n\r\n$b";
			my $chunks = join('', map { sprintf("%x\r\n%s\r\n", length $_, $_) }
				grep { length } split /(.{1,7})/s, $b);
			$script{"/$loc/$i/$k/ch"} = "HTTP/1.1 200 OK\r\nContent-Type: $type\r\n"
				. "Transfer-Encoding: chunked\r\n\r\n${chunks}0\r\n\r\n";
		}
	}
}

my $p = 'proxy_pass http://127.0.0.1:BACKEND; proxy_http_version 1.1; proxy_set_header Connection "";';
my $server = <<"EOF";
    include /etc/nginx/koi-utf;
    server {
        listen 127.0.0.1:PORT;
        server_name localhost;
        location /ck/ { $p proxy_cookie_domain example.org www.test; proxy_cookie_path /app/ /; }
        location /ckr/ { $p proxy_cookie_domain ~\\.?(?<d>[a-z]+)\\.org\$ \$d.net; proxy_cookie_path ~*^/app/(.*)\$ /new/\$1; }
        location /ckf/ { $p proxy_cookie_flags sid secure httponly samesite=strict; proxy_cookie_flags ~^t nosecure nosamesite; proxy_cookie_flags ~ samesite=lax; }
        location /ckfc/ { $p proxy_cookie_flags ~^A\$ secure; proxy_cookie_flags SID samesite=none; proxy_cookie_domain example.org x.test; }
        location /sf/ { $p sub_filter foo bar; }
        location /sfo/ { $p sub_filter foo bar; sub_filter_once off; }
        location /sfm/ { $p sub_filter foo bar; sub_filter o 0; sub_filter_once off; sub_filter host \$host; }
        location /sft/ { $p sub_filter foo bar; sub_filter_types text/plain; sub_filter_last_modified on; }
        location /cs/ { $p charset utf-8; }
        location /csu/ { $p charset utf-8; source_charset koi8-r; charset_types text/plain; override_charset on; }
    }
EOF
nginx_beside($t, $server, %script);

my @req = map { [$_] } sort keys %script;

my ($diffs, $same) = beside_table(\@req, sub {
	my ($port, $head, $body) = @_;
	my @f = map { my $n = $_; map { "$n=$_" } $head =~ /^\Q$n\E: ([^\r]*)/mgi }
		qw/Set-Cookie Content-Type Content-Length Last-Modified ETag Transfer-Encoding/;
	if ($head =~ /^Transfer-Encoding: chunked/mi) {
		my $out = '';
		while ($body =~ s/^([0-9a-f]+)\r\n//i) {
			my $n = hex $1;
			last if !$n;
			$out .= substr($body, 0, $n, '');
			$body =~ s/^\r\n//;
		}
		$body = $out;
	}
	my ($code) = $head =~ /^HTTP\/1\.1 (\d{3})/;
	@f = grep { !/^(?:Content-Length|Transfer-Encoding)=/ } @f;
	return join(' | ', $code // 'none', @f, $body);
});
is(scalar(@$diffs), 0, scalar(@req) . " answers: sluice as nginx ($same the same)")
	or diag(join("\n", @$diffs[0 .. ($#$diffs)]));
