#!/usr/bin/perl

# DNS lookup counters of each resolve line, kept in the zone: lookups and
# how they ended (NOERROR, NXDOMAIN, SERVFAIL, REFUSED, other rcodes,
# timeout) in the metrics (parsed by prometheus_client's parser) and the
# API; carried across a reload.

use warnings;
use strict;

use Test::More;
use JSON::PP;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;

system('/usr/bin/python3', '-c', 'import prometheus_client.parser') == 0
	or plan(skip_all => 'no python3-prometheus-client for /usr/bin/python3');

my $t = Test::Sluice->new()->has(qw/http upstream_zone/)->plan(8);
my $d = $t->testdir();

$t->write_file_expand('sluice.conf', <<'EOF2');

%%TEST_GLOBALS%%

worker_processes 2;

events {
}

http {
    access_log off;
    resolver 127.0.0.1:%%PORT_8053%% valid=1s;
    resolver_timeout 500ms;

    upstream app {
        zone z 64k;
        server app.test:%%PORT_8081%% resolve;
    }

    server {
        listen 127.0.0.1:%%PORT_8080%%;
        location / { proxy_pass http://app; }
        location = /metrics { metrics; }
        location /api/ { api; }
    }
}

EOF2

$t->write_file('parse.py', <<'EOF2');
import json, sys
from prometheus_client.parser import text_string_to_metric_families
out = []
for f in text_string_to_metric_families(sys.stdin.read()):
    for s in f.samples:
        out.append([s.name, s.labels, s.value, f.type])
print(json.dumps(out))
EOF2

$t->write_file('dns.txt', "app.test A 127.0.0.1 1\n");
$t->dns(port(8053));
$t->backend(port(8081));
$t->run();

sub scrape {
	my ($body) = (http_get('/metrics') // '') =~ /\r\n\r\n(.*)\z/s;
	$t->write_file('scrape.txt', $body // '');
	return eval { decode_json(`/usr/bin/python3 $d/parse.py < $d/scrape.txt 2>&1`) } // [];
}

# The counter of this name (and result label, if given) for the line.
sub counter {
	my ($m, $name, $result) = @_;
	my @s = grep { $_->[0] eq $name && $_->[1]{upstream} eq 'app'
		&& (!defined $result || ($_->[1]{result} // '') eq $result) } @$m;
	return @s == 1 ? $s[0][2] : -1;
}

# The first answer may come after a first request's wait (resolver_timeout)
# on a busy machine.
ok(poll_until(sub { (http_get('/x') // '') =~ /^HTTP\/1.1 200/ }, 8), 'resolved and served');

# An answer every second: NOERROR, then SERVFAIL, REFUSED, NXDOMAIN, and
# silence (timeouts).
my %want = (SERVFAIL => "app.test RCODE 2\n", REFUSED => "app.test RCODE 5\n",
	NXDOMAIN => "app.test RCODE 3\n", timeout => "app.test SILENT\n");
for my $r (qw/SERVFAIL REFUSED NXDOMAIN timeout/) {
	$t->write_file('dns.txt', $want{$r});
	ok(poll_until(sub {
		counter(scrape(), 'sluice_upstream_resolve_lookup_results_total', $r) >= 1 }, 8),
		"$r counted");
}

my $m = scrape();
my $lookups = counter($m, 'sluice_upstream_resolve_lookups_total');
my $sum = 0;
$sum += counter($m, 'sluice_upstream_resolve_lookup_results_total', $_)
	for qw/NOERROR NXDOMAIN SERVFAIL REFUSED other timeout/;
ok($lookups >= 5 && $sum == $lookups, 'every lookup ended one way') or diag("$lookups $sum");

my ($body) = (http_get('/api/9/http/upstreams/app') // '') =~ /\r\n\r\n(.*)\z/s;
my $api = eval { decode_json($body) } // {};
my $line = $api->{sluice}{resolve}[0] // {};
ok(($line->{lookups} // 0) >= 5 && ($line->{results}{SERVFAIL} // 0) >= 1
	&& exists $line->{results}{NOERROR}, 'API: lookups and results') or diag($body);

# A reload carries the line's counters.
$t->write_file('dns.txt', "app.test A 127.0.0.1 1\n");
my $before = counter(scrape(), 'sluice_upstream_resolve_lookups_total');
$t->reload();
ok(poll_until(sub {
	my $now = scrape();
	return counter($now, 'sluice_upstream_resolve_lookups_total') > $before
		&& counter($now, 'sluice_upstream_resolve_lookup_results_total', 'SERVFAIL') >= 1;
}, 8), 'carried across a reload');
