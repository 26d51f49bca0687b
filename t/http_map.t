#!/usr/bin/perl

# The map module in http: exact strings (case ignored, "" and escaped
# keywords), hostnames masks and their precedence over regexes, regexes in
# order with positional and named captures (in the value and afterwards),
# default, include, variables in values, a map of a map, use before the
# block, caching per request and volatile, the cycle guard, and map
# variables in add_header, proxy_set_header, proxy_pass and access_log.
# Then broken maps refused by -t with nginx's message and FILE:LINE.

use warnings;
use strict;

use Test::More;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;

my $t = Test::Sluice->new()->has(qw/http map rewrite proxy/)->plan(46);
my $d = $t->testdir();

$t->write_file_expand('sluice.conf', <<'EOF');

%%TEST_GLOBALS%%

events {
}

http {
    log_format m "$uri $exact";
    access_log %%TESTDIR%%/map.log m;

    server {
        listen 127.0.0.1:%%PORT_8080%%;

        # Used before its block.
        location /early { return 200 "early=$later"; }

        location /exact { return 200 "exact=$exact"; }
        location /host { return 200 "host=$hostmap"; }
        location /re/ { return 200 "re=$re first=$first"; }
        location /order { return 200 "order=$order"; }
        location /inc { return 200 "inc=$included"; }
        location /chain { return 200 "chain=$chained"; }
        location /nodefault { return 200 "[$nodefault]"; }
        location /cache {
            set $v a;
            set $seen "$cached|$fresh";
            set $v b;
            return 200 "$seen $cached $fresh";
        }
        location /cycle { return 200 "cycle=[$loop_a]"; }
        location /header {
            add_header X-Mapped $exact;
            return 204;
        }
        location /proxy/ {
            proxy_set_header X-Mapped "h:$exact";
            proxy_pass http://127.0.0.1:%%PORT_8081%%/echo;
        }
        location /dynamic { proxy_pass http://$backend; }
    }

    map $arg_k $exact {
        Foo       lower-foo;
        BAR       bar;
        ""        empty;
        \default escaped-default;
        default   "default $uri";
    }

    map $http_x_name $hostmap {
        hostnames;
        default           none;
        mail.example.com  exact;
        *.example.com     star;
        *.a.example.com   longer-star;
        .example.org      dot;
        www.*             tail;
        www.example.*     longer-tail;
        ~^www             regex;
    }

    map $uri $re {
        ~^/re/(?<first>[a-z]+)/(\d+)$  "$first-$2";
        ~*^/RE/CASE                    "caseless $uri";
        ~^/re/                         "plain";
    }

    map $arg_k $order {
        ~^a      first-regex;
        ~^ab     second-regex;
        abc      exact;
        default  default;
    }

    map $arg_k $included {
        include map.inc;
        default from-main;
    }

    map $exact $chained {
        lower-foo "chained $arg_k";
    }

    map $arg_k $nodefault { x y; }

    map $v $cached { default "<$v>"; }
    map $v $fresh { volatile; default "<$v>"; }

    map $loop_b $loop_a { default "a$loop_b"; }
    map $loop_a $loop_b { default "b$loop_a"; }

    map $arg_to $backend {
        up    127.0.0.1:%%PORT_8081%%/echo;
        default 127.0.0.1:1;
    }

    map $arg_k $later { default late; }
}

EOF

$t->write_file('map.inc', "from-file   file;\n\\include   keyword;\n");

$t->backend(port(8081));
$t->run();

sub get { my ($uri, %h) = @_;
	my $head = join('', map { "$_: $h{$_}\n" } sort keys %h);
	my $r = http("GET $uri HTTP/1.0\nHost: localhost\n$head\n");
	return $r =~ /\r\n\r\n(.*)\z/s ? $1 : $r;
}

# Exact strings.
is(get('/exact?k=foo'), 'exact=lower-foo', 'exact string');
is(get('/exact?k=FOO'), 'exact=lower-foo', 'exact string ignores case');
is(get('/exact?k=bar'), 'exact=bar', 'a key written in capitals');
is(get('/exact'), 'exact=empty', 'the empty string');
is(get('/exact?k=default'), 'exact=escaped-default', '\\default is a string');
is(get('/exact?k=zz'), 'exact=default /exact', 'default, with a variable');
is(get('/nodefault?k=q'), '[]', 'no default: empty');
is(get('/early'), 'early=late', 'a map used before its block');

# hostnames.
is(get('/host', 'X-Name' => 'mail.example.com'), 'host=exact', 'hostnames: exact first');
is(get('/host', 'X-Name' => 'MAIL.Example.com.'), 'host=exact', 'hostnames: case and final dot');
is(get('/host', 'X-Name' => 'x.y.example.com'), 'host=star', 'hostnames: *.example.com');
is(get('/host', 'X-Name' => 'x.a.example.com'), 'host=longer-star', 'hostnames: the longest prefix mask');
is(get('/host', 'X-Name' => 'example.com'), 'host=none', 'hostnames: *. needs a name before');
is(get('/host', 'X-Name' => 'example.org'), 'host=dot', 'hostnames: .example.org, the name itself');
is(get('/host', 'X-Name' => 'a.example.org'), 'host=dot', 'hostnames: .example.org, a name under it');
is(get('/host', 'X-Name' => 'www.example.com'), 'host=star', 'hostnames: a prefix mask before a suffix mask');
is(get('/host', 'X-Name' => 'www.example.net'), 'host=longer-tail', 'hostnames: the longest suffix mask');
is(get('/host', 'X-Name' => 'www.test'), 'host=tail', 'hostnames: www.*');
is(get('/host', 'X-Name' => 'wwwtest'), 'host=regex', 'hostnames: masks before regexes');

# Regexes.
is(get('/re/abc/42'), 're=abc-42 first=abc', 'regex captures, named one afterwards');
is(get('/re/case'), 're=caseless /re/case first=', '~* ignores case');
is(get('/re/ABC/42'), 're=plain first=', 'regexes in order');
is(get('/order?k=abc'), 'order=exact', 'an exact string before regexes');
is(get('/order?k=abx'), 'order=first-regex', 'the first regex that matches');
is(get('/order?k=zz'), 'order=default', 'default after regexes');

is(get('/inc?k=from-file'), 'inc=file', 'include');
is(get('/inc?k=include'), 'inc=keyword', 'include: an escaped keyword');
is(get('/inc?k=other'), 'inc=from-main', 'include: default of the main file');
is(get('/chain?k=foo'), 'chain=chained foo', 'a map of a map');

is(get('/cache'), '<a>|<a> <a> <b>', 'cached per request, volatile evaluated again');

is(get('/cycle'), 'cycle=[]', 'a cycle gives the empty string');
ok($t->waitforlog(qr/\[error\].*cycle while evaluating variable "loop_[ab]"/), 'a cycle is logged');

like(http_get('/header?k=foo'), qr/^X-Mapped: lower-foo\r$/m, 'in add_header');
like(http_get('/proxy/?k=bar'), qr/^X-Mapped: h:bar\r$/mi, 'in proxy_set_header');
like(http_get('/dynamic?to=up'), qr/^GET \/echo HTTP/m, 'in proxy_pass');

ok($t->waitforlog(qr{^/exact lower-foo$}m, 1, 'map.log'), 'in access_log');

$t->expect_errors(qr/cycle while evaluating/);
$t->stop();

###############################################################################
# Broken maps: -t fails with nginx's message at the line.

my @bad = (
	['no $', "map \$uri x { }", qr/^invalid variable name "x"$/, 1],
	['built-in', "map \$uri \$host { }", qr/^the duplicate "host" variable$/, 1],
	['duplicate default', "map \$uri \$x {\n default a;\n default b;\n}", qr/^duplicate default map parameter$/, 3],
	['conflicting', "map \$uri \$x {\n a 1;\n A 2;\n}", qr/^conflicting parameter "a"$/, 3],
	['bad regex', "map \$uri \$x {\n ~( 1;\n}", qr/^regex "\(" is invalid/, 2],
	['bad mask', "map \$uri \$x {\n hostnames;\n *.*.com 1;\n}", qr/^invalid hostname or wildcard "\*\.\*\.com"$/, 3],
	['parameters', "map \$uri \$x {\n a b c;\n}", qr/^invalid number of the map parameters$/, 2],
	['unknown variable', "map \$uri \$x {\n a \$nope;\n}", qr/^unknown "nope" variable$/, 2],
	['block inside', "map \$uri \$x {\n a { }\n}", qr/^unexpected "\{"$/, 2],
	['in server', "server {\n map \$uri \$x { }\n}", qr/^"map" directive is not allowed here$/, 2],
);

for my $c (@bad) {
	my ($name, $text, $re, $line) = @$c;
	$t->write_file('bad.conf', "events {}\nhttp {\n$text\n}\n");
	my ($rc, $out, $err) = $t->run_binary('-p', "$d/", '-c', 'bad.conf', '-e', 'bad.log', '-t');
	my ($msg, $l) = $err =~ /^sluice: \[emerg\] (.*) in \Q$d\E\/bad\.conf:(\d+)$/m;
	ok($rc == 1 && defined $msg && $msg =~ $re && $l == $line + 2, "refused: $name")
		or diag($err);
}
