#!/usr/bin/perl

# sluice beside nginx (Debian's /usr/sbin/nginx) on what the everyday
# modules answer by themselves: return (every code nginx knows, with and
# without text, redirects), error_page (=code, =, a named location, a
# URL, several codes, a page that is itself missing), add_header (always
# or not), expires, limit_except before a location's return, auth_basic,
# internal, allow/deny, default_type and types. Each request goes to both;
# the status code, the fields but Date, Server and Connection (in any
# order; Expires' date left out) and the body (the page's server name
# left out) must be the same.
#
# Left out, as sluice.conf(5) says: reason phrases (nginx sends none for
# codes it has no words for, sluice RFC 9110's), `return 408` and
# `return 499` (nginx closes without an answer), codes 494-498 (nginx's
# own), and `return 304` (nginx adds a length and a type) or a redirect
# code without its URL (nginx sends an empty Location).

use warnings;
use strict;

use Test::More;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;
use Test::Sluice::Grpc qw/nginx_beside beside_table/;

plan(skip_all => 'no nginx') unless -x '/usr/sbin/nginx';

my $t = Test::Sluice->new()->has(qw/http/)->plan(1);
my $d = $t->testdir();
mkdir "$d/www";
$t->write_file('www/404.html', 'custom 404');
$t->write_file('www/f.txt', 'file');
$t->write_file('htpasswd', "u:{PLAIN}p\n");
my $conf = <<"EOF";
    server {
        listen 127.0.0.1:PORT;
        server_name localhost;
        root $d/www;
        error_page 404 /404.html;
        location /r1 { return 204; }
        location /r2 { return 301 /x; }
        location /r3 { return 302 "http://e.com/\$uri?\$args"; }
        location /r4 { return 418 "teapot"; }
        location /r5 { return 500; }
        location /r6 { return 444; }
        location /r7 { return 200; }
        location /r8 { return https://e.com; }
        location /r9 { return 307 /tmp; }
        location /r10 { return 599 "x"; }
        location /e1 { error_page 403 =200 /f.txt; return 403; }
        location /e2 { error_page 403 = \@named; return 403; }
        location \@named { return 202 "named \$uri"; }
        location /e3 { error_page 403 http://e.com/err; return 403; }
        location /e4 { error_page 500 502 =503 /f.txt; return 502; }
        location /e5 { error_page 404 =410 /404.html; return 404; }
        location /e6 { error_page 403 /nothing-here; return 403; }
        location /h1 { add_header X-A a; add_header X-B b always; return 200 "h1"; }
        location /h2 { add_header X-A a; add_header X-B b always; return 404; }
        location /h3 { expires 1h; return 200 "h3"; }
        location /h4 { expires -1; return 200 "h4"; }
        location /h5 { expires epoch; add_header Cache-Control private; return 200 "h5"; }
        location /h6 { add_header X-Dup 1; add_header X-Dup 2; return 200 "h6"; }
        location /l1 { limit_except GET { deny all; } return 200 "l1"; }
        location /a1 { auth_basic "realm x"; auth_basic_user_file $d/htpasswd; return 200 "a1"; }
        location /i1 { internal; return 200 "i1"; }
        location /d1 { deny all; return 200; }
        location /d2 { allow 127.0.0.1; deny all; return 200 "d2"; }
        location = /c200 { return 200; }
        location = /c201 { return 201; }
        location = /c202 { return 202; }
        location = /c203 { return 203; }
        location = /c204 { return 204; }
        location = /c205 { return 205; }
        location = /c206 { return 206; }
        location = /c207 { return 207; }
        location = /c208 { return 208; }
        location = /c226 { return 226; }
        location = /c300 { return 300; }
        location = /c305 { return 305; }
        location = /c306 { return 306; }
        location = /c400 { return 400; }
        location = /c401 { return 401; }
        location = /c402 { return 402; }
        location = /c403 { return 403; }
        location = /c404 { return 404; }
        location = /c405 { return 405; }
        location = /c406 { return 406; }
        location = /c407 { return 407; }
        location = /c409 { return 409; }
        location = /c410 { return 410; }
        location = /c411 { return 411; }
        location = /c412 { return 412; }
        location = /c413 { return 413; }
        location = /c414 { return 414; }
        location = /c415 { return 415; }
        location = /c416 { return 416; }
        location = /c417 { return 417; }
        location = /c418 { return 418; }
        location = /c421 { return 421; }
        location = /c422 { return 422; }
        location = /c423 { return 423; }
        location = /c424 { return 424; }
        location = /c425 { return 425; }
        location = /c426 { return 426; }
        location = /c428 { return 428; }
        location = /c429 { return 429; }
        location = /c431 { return 431; }
        location = /c451 { return 451; }
        location = /c500 { return 500; }
        location = /c501 { return 501; }
        location = /c502 { return 502; }
        location = /c503 { return 503; }
        location = /c504 { return 504; }
        location = /c505 { return 505; }
        location = /c506 { return 506; }
        location = /c507 { return 507; }
        location = /c508 { return 508; }
        location = /c509 { return 509; }
        location = /c510 { return 510; }
        location = /c511 { return 511; }
        location = /c599 { return 599; }
        location /t1 { default_type application/json; return 200 '{"a":1}'; }
        location /t2 { types { } default_type text/x-foo; }
    }
EOF
nginx_beside($t, $conf);

my @req = (map { ["/r$_"] } 1 .. 10);
push @req, map { ["/c$_"] } (200, 201, 202, 203, 204, 205, 206, 207, 208, 226, 300, 305, 306, 400, 401, 402, 403, 404, 405, 406, 407, 409, 410, 411, 412, 413, 414, 415, 416, 417, 418, 421, 422, 423, 424, 425, 426, 428, 429, 431, 451, 500, 501, 502, 503, 504, 505, 506, 507, 508, 509, 510, 511, 599);
push @req, map { ["/e$_"] } 1 .. 6;
push @req, map { ["/h$_"] } 1 .. 6;
push @req, ['/l1'], ['/l1', 'POST'], ['/l1', 'HEAD'], ['/a1'], ['/a1', 'Authorization: Basic dTpw'],
	['/a1', 'Authorization: Basic dTp4'], ['/a1', 'Authorization: Bearer x'],
	['/a1', 'Authorization: Basic !!'], ['/i1'], ['/d1'], ['/d2'], ['/t1'], ['/t2/f.txt'],
	['/nothing'], ['/r3?a=1'], ['/r1', 'HEAD'], ['/r4', 'HEAD'], ['/e1', 'POST'], ['/nothing', 'POST'];

# What a client sees: "CODE | fields | body".
my ($diffs, $same) = beside_table(\@req, sub {
	my ($port, $head, $body) = @_;
	my ($code) = $head =~ /^HTTP\/1\.1 (\d{3})/;
	my @f = grep { !/^(Date|Server|Connection|HTTP\/1)/ } split /\r\n/, $head;
	s/^(Expires: ).*/$1DATE/ for @f;
	$body =~ s{<hr><center>(?:nginx|sluice)/[^<]*</center>}{<hr><center>SERVER</center>};
	return join(' | ', $code // 'none', sort(@f), $body);
});
is(scalar(@$diffs), 0, scalar(@req) . " requests to the everyday modules: sluice answers as nginx does ($same the same)")
	or diag(join("\n", @$diffs));
