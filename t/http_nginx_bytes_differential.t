#!/usr/bin/perl

# sluice beside nginx (Debian's /usr/sbin/nginx) on a URI whose escapes
# decode to bytes that are not UTF-8 (Latin-1 `%E9`, a sequence cut short,
# a byte that is never UTF-8), and on the four bytes of one of the code
# points sluice keeps such a byte as: `$uri` in a header (`add_header`), a
# body (`return`), a redirect's `Location`, a header sent upstream
# (`proxy_set_header`), `$request_filename`, and the access log line
# (default escaping, and `escape=none`). Each must carry the bytes nginx's
# does. The paths sent upstream and the files opened are compared by
# t/http_nginx_uri_differential.t and t/http_nginx_static_differential.t.

use warnings;
use strict;

use Test::More;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;
use Test::Sluice::Grpc qw/nginx_beside_each beside_table/;

plan(skip_all => 'no nginx') unless -x '/usr/sbin/nginx';

my $t = Test::Sluice->new()->has(qw/http/)->plan(3);
my $d = $t->testdir();

my $server = <<"EOF";
    log_format esc '\$uri|\$request_filename';
    log_format raw escape=none '\$uri';
    server {
        listen 127.0.0.1:PORT;
        server_name localhost;
        root $d/www;
        access_log $d/esc_WHO.log esc;
        access_log $d/raw_WHO.log raw;
        location /h/ { add_header X-U \$uri; add_header X-F \$request_filename; return 200 "\$uri|\$request_filename"; }
        location /r/ { return 302 /to\$uri; }
        location /p/ {
            proxy_set_header X-U \$uri;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_pass http://127.0.0.1:BACKEND;
        }
    }
EOF
(my $mine = $server) =~ s/WHO/sluice/g;
(my $theirs = $server) =~ s/WHO/nginx/g;
nginx_beside_each($t, $mine, $theirs);

my @paths = ('/caf%E9', '/caf%C3%A9', '/a%E9%FFb%80', '/c%C3', '/d%F4%8F%BF%A9', '/e%C3%A9%E9/x');
my @req = map { my $p = $_; map { ["/$_$p"] } qw/h r p/ } @paths;

my ($diffs, $same) = beside_table(\@req, sub {
	my ($port, $head, $body) = @_;
	my @f = map { my ($v) = $head =~ /^\Q$_\E: ([^\r]*)/mi; defined $v ? "$_=$v" : () }
		qw/X-U X-F Location/;
	my ($code) = $head =~ /^HTTP\/1\.1 (\d{3})/;
	# What the backend got (the raw backend answers 200 with nothing).
	my @up = grep { /^GET / } $t->raw_requests(port(8082));
	my $up = $code && $code == 200 && $head !~ /X-U/ && @up
		? ($up[-1] =~ /^(GET \S+).*^X-U: ([^\r]*)/ms ? "up $1 X-U=$2" : 'up ?') : '';
	# A page's body names the server.
	$body = '' if $up || !$code || $code != 200;
	return join(" | ", $code // "none", @f, $up, $body);
});
is(scalar(@$diffs), 0, scalar(@req) . " requests: sluice's bytes are nginx's ($same the same)")
	or diag(join("\n", @$diffs));

# The log lines, in order, once both have written them.
my %log;
for my $who (qw/sluice nginx/) {
	for my $f (qw/esc raw/) {
		my $lines = '';
		for (1 .. 50) {
			$lines = -e "$d/${f}_$who.log" ? $t->read_file("${f}_$who.log") : '';
			last if ($lines =~ tr/\n//) >= @req;
			select(undef, undef, undef, 0.1);
		}
		$lines =~ s/\Q$d\E/DIR/g;
		$log{"$f $who"} = $lines;
	}
}
is($log{'esc sluice'}, $log{'esc nginx'}, 'access log, default escaping: the same lines');
is($log{'raw sluice'}, $log{'raw nginx'}, 'access log, escape=none: the same bytes');
