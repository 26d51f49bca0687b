#!/usr/bin/perl

# metrics: the zone upstreams' time histograms (connect, header, response)
# with the buckets metrics_buckets sets, parsed by prometheus_client's
# parser: counted by both workers, cumulative buckets, +Inf, _sum and
# _count; carried across a reload that keeps the buckets, started again by
# one that changes them. Config errors with file:line.

use warnings;
use strict;

use Test::More;
use JSON::PP;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;

system('/usr/bin/python3', '-c', 'import prometheus_client.parser') == 0
	or plan(skip_all => 'no python3-prometheus-client for /usr/bin/python3');

my $t = Test::Sluice->new()->has(qw/http upstream_zone/)->plan(13);
my $d = $t->testdir();

my $conf = <<'EOF2';

%%TEST_GLOBALS%%

worker_processes 2;

events {
}

http {
    access_log off;
    metrics_buckets BUCKETS;

    upstream app {
        zone z 64k;
        server 127.0.0.1:%%PORT_8081%%;
    }

    server {
        listen 127.0.0.1:%%PORT_8080%% reuseport;
        location / { proxy_pass http://app; }
        location = /metrics { metrics; }
    }
}

EOF2

sub conf {
	my ($buckets) = @_;
	(my $c = $conf) =~ s/BUCKETS/$buckets/;
	$t->write_file_expand('sluice.conf', $c);
}

# Fails on anything the parser refuses; histogram families are checked
# by the parser itself (buckets, +Inf, _count).
$t->write_file('parse.py', <<'EOF2');
import json, sys
from prometheus_client.parser import text_string_to_metric_families
out = []
for f in text_string_to_metric_families(sys.stdin.read()):
    for s in f.samples:
        out.append([s.name, s.labels, s.value, f.type])
print(json.dumps(out))
EOF2

conf('50ms 1s');
$t->backend(port(8081));
$t->run();

sub scrape {
	my ($body) = (http_get('/metrics') // '') =~ /\r\n\r\n(.*)\z/s;
	$t->write_file('scrape.txt', $body // '');
	return eval { decode_json(`/usr/bin/python3 $d/parse.py < $d/scrape.txt 2>&1`) } // [];
}

sub value {
	my ($m, $name, %labels) = @_;
	my @s = grep { my $s = $_; $s->[0] eq $name
		&& !grep { ($s->[1]{$_} // "\0") ne $labels{$_} } keys %labels } @$m;
	return @s == 1 ? $s[0][2] : -1;
}

# Five quick answers, one after 0.3 s; on new connections, so that each
# worker is likely to take some.
http_get("/q$_") for 1 .. 5;
like(http_get('/slow/0.3/x'), qr/^HTTP\/1.1 200/, 'a slow answer');

my $m = scrape();
my %h = (upstream => 'app');
my $hdr = 'sluice_upstream_header_seconds';
is(value($m, "${hdr}_count", %h), 6, 'header times: six attempts');
is(value($m, "${hdr}_bucket", %h, le => '+Inf'), 6, 'the +Inf bucket holds them all');
is(value($m, "${hdr}_bucket", %h, le => '1.0'), 6, 'all within 1 s');
ok(value($m, "${hdr}_bucket", %h, le => '0.05') <= 5, 'the slow one above 50 ms');
ok(value($m, "${hdr}_sum", %h) >= 0.3, 'the sum has the slow one');
is(value($m, 'sluice_upstream_response_seconds_count', %h), 6, 'response times');
is(value($m, 'sluice_upstream_connect_seconds_count', %h), 6, 'connect times');
like($t->read_file('scrape.txt'), qr/^# TYPE sluice_upstream_header_seconds histogram$/m,
	'type histogram');

# A reload that keeps the buckets keeps the counts.
$t->reload();
ok(poll_until(sub { value(scrape(), "${hdr}_count", %h) >= 6 }, 5)
	&& value(scrape(), "${hdr}_bucket", %h, le => '1.0') >= 6, 'carried across a reload');

# One that changes them starts again.
conf('10ms 100ms 2s');
$t->reload();
ok(poll_until(sub { value(scrape(), "${hdr}_bucket", %h, le => '2.0') == 0 }, 5),
	'new buckets: counted from zero');

# Config errors with file:line.
$t->write_file('bad.conf', "events {}\nhttp {\n metrics_buckets 1s 500ms;\n}\n");
my (undef, undef, $err) = $t->run_binary('-p', "$d/", '-c', 'bad.conf', '-e', 'stderr', '-t');
like($err, qr/\[emerg\].*invalid value "500ms" in "metrics_buckets" directive in \S*bad\.conf:3/,
	'decreasing bounds refused');
$t->write_file('bad.conf', "events {}\nhttp {\n server {\n  metrics_buckets 1s;\n }\n}\n");
(undef, undef, $err) = $t->run_binary('-p', "$d/", '-c', 'bad.conf', '-e', 'stderr', '-t');
like($err, qr/\[emerg\].*"metrics_buckets" directive is not allowed here in \S*bad\.conf:4/,
	'not in a server');
