#!/usr/bin/perl

# sluice beside nginx (Debian's /usr/sbin/nginx) on the Location and
# Refresh fields an upstream's redirects come back with: proxy_redirect
# default (with a URI part, without one, to an upstream block), off, and
# the redirects sluice makes itself (the slash a proxy_pass prefix adds, a
# location proxied to a fixed URI). The backend answers each path with a
# 302 whose Location and Refresh name one of a list of targets (its own
# address with and without the URI part, other hosts and schemes, a
# relative path, a scheme-relative one, upper case, a query and fragment,
# nothing). The status, Location and Refresh must be the same.

use warnings;
use strict;

use Test::More;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;
use Test::Sluice::Grpc qw/nginx_beside beside_table/;

plan(skip_all => 'no nginx') unless -x '/usr/sbin/nginx';

my $t = Test::Sluice->new()->has(qw/http/)->plan(1);

my $b = port(8082);
my @targets = ("http://127.0.0.1:$b/v1/x", "http://127.0.0.1:$b/other", '/v1/x',
	"http://127.0.0.1:$b/v1/", "https://127.0.0.1:$b/v1/x", 'http://localhost/v1/x',
	"http://127.0.0.1:$b/", "http://127.0.0.1:$b", "//127.0.0.1:$b/v1/x",
	"HTTP://127.0.0.1:$b/v1/x", "http://127.0.0.1:$b/v1/x?y#z", 'x', '');
my %script;
for my $i (1 .. @targets) {
	my $l = $targets[$i - 1];
	$script{$_} = "HTTP/1.1 302 Found\r\nLocation: $l\r\nRefresh: 5; url=$l\r\n"
		. "Content-Length: 0\r\n\r\n" for "/v1/l$i", "/l$i";
}

nginx_beside($t, <<'EOF', %script);
    server {
        listen 127.0.0.1:PORT;
        server_name localhost;
        location /api/ { proxy_pass http://127.0.0.1:BACKEND/v1/; }
        location /bare/ { proxy_pass http://127.0.0.1:BACKEND; }
        location /off/ { proxy_pass http://127.0.0.1:BACKEND/v1/; proxy_redirect off; }
        location /u/ { proxy_pass http://upstr/v1/; }
        location = /exact { proxy_pass http://127.0.0.1:BACKEND/v1/l1; }
    }
    upstream upstr { server 127.0.0.1:BACKEND; }
EOF

my @req = map { my $n = $_; map { ["$_$n"] } qw{/api/l /bare/l /off/l /u/l} } 1 .. @targets;
push @req, ['/api'], ['/u'], ['/bare'], ['/exact'], ['/api?x=1'];

my ($diffs, $same) = beside_table(\@req, sub {
	my ($port, $head) = @_;
	my ($code) = $head =~ /^HTTP\/1\.1 (\d{3})/;
	my ($loc) = $head =~ /^Location: ([^\r]*)/mi;
	my ($refresh) = $head =~ /^Refresh: ([^\r]*)/mi;
	return join(' | ', $code // 'none', $loc // '-', $refresh // '-');
});
is(scalar(@$diffs), 0, scalar(@req) . " redirects: sluice rewrites them as nginx does ($same the same)")
	or diag(join("\n", @$diffs));
