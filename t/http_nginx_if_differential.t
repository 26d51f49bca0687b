#!/usr/bin/perl

# sluice beside nginx (Debian's /usr/sbin/nginx) on an `if` in a location
# whose block holds the location's own settings (nginx's "if in location"
# directives): the CORS preflight idiom (add_header then return 204),
# nginx's "if is evil" example (two ifs that hold: only the last one's
# headers), expires, root, error_page and add_header in an `if` of a
# location that proxies or serves files, and the location's settings when
# the condition does not hold. The status, the fields and the body must be
# the same. An `if` with a proxy_pass of its own (the legacy "proxy what is
# not a file" idiom, and a pass with variables) is compared too.

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
mkdir "$d/$_" for qw/www www\/rt alt alt\/rt www\/pi www\/pv/;
$t->write_file('www/pi/f.txt', 'static pi');
$t->write_file('www/pv/f.txt', 'static pv');
$t->write_file('www/rt/f.txt', 'main root');
$t->write_file('alt/rt/f.txt', 'alt root');

nginx_beside($t, <<"EOF");
    server {
        listen 127.0.0.1:PORT;
        server_name localhost;
        location /c/ {
            if (\$request_method = OPTIONS) {
                add_header Access-Control-Allow-Origin "*";
                add_header Access-Control-Allow-Methods "GET, POST, OPTIONS";
                add_header Access-Control-Max-Age 1728000;
                add_header Content-Type "text/plain; charset=utf-8";
                return 204;
            }
            add_header X-Main 1;
            return 200 "main";
        }
        location /two/ {
            set \$t 1;
            add_header X-Loc 1;
            if (\$t) { add_header X-First 1; }
            if (\$arg_s) { add_header X-Second 2; }
            return 200 "two";
        }
        location /ex/ {
            if (\$arg_e) { expires 1h; add_header X-E \$arg_e; }
            expires epoch;
            return 200 "ex";
        }
        location /rt/ {
            root $d/www;
            if (\$arg_r) { root $d/alt; }
        }
        location /px/ {
            proxy_pass http://127.0.0.1:BACKEND;
            add_header X-Loc 1;
            if (\$arg_h) { add_header X-If \$arg_h always; }
        }
        location /ep/ {
            if (\$arg_e) { error_page 404 =200 /fallback; }
            return 404;
        }
        location = /fallback { return 200 "fb"; }
        location /pi/ {
            root $d/www;
            if (!-f \$request_filename) { proxy_pass http://127.0.0.1:BACKEND; break; }
        }
        location /pe2/ {
            error_page 404 = /pi/f.txt;
            if (\$arg_x) { proxy_pass http://127.0.0.1:BACKEND; }
            return 404;
        }
        location /pv/ {
            root $d/www;
            set \$b 127.0.0.1:BACKEND;
            if (\$arg_p) { add_header X-Via var; proxy_pass http://\$b; break; }
        }
    }
EOF

my @req = (['/c/', 'OPTIONS'], ['/c/'], ['/c/', 'POST'], ['/two/'], ['/two/?s=1'],
	['/ex/'], ['/ex/?e=1'], ['/rt/f.txt'], ['/rt/f.txt?r=1'], ['/rt/none?r=1'],
	['/px/a'], ['/px/a?h=yes'], ['/ep/'], ['/ep/?e=1'], ['/pi/f.txt'], ['/pi/none'],
	['/pv/f.txt'], ['/pv/f.txt?p=1'], ['/pe2/?x=1']);

my ($diffs, $same) = beside_table(\@req, sub {
	my ($port, $head, $body) = @_;
	my ($code) = $head =~ /^HTTP\/1\.1 (\d{3})/;
	my @f = sort map { /^(X-[^:]*|Access-Control-[^:]*|Cache-Control|Content-Type|Content-Length): (.*?)\r?$/i ? "$1=$2" : () }
		split /\r\n/, $head;
	push @f, 'Expires' if $head =~ /^Expires: /mi;
	$body = '' if $code && $code >= 400;
	return join(' | ', $code // 'none', @f, $body);
});
is(scalar(@$diffs), 0, scalar(@req) . " requests: sluice as nginx ($same the same)")
	or diag(join("\n", @$diffs));
