#!/usr/bin/perl

# README.md's Prometheus section against the real thing: the scrape config
# passes `promtool check config` (when Debian's prometheus package is
# installed), and every metric its queries name, with the labels they
# select on, is in a running sluice's /metrics for an upstream with a zone.

use warnings;
use strict;

use Test::More;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;

my $t = Test::Sluice->new()->has(qw/http proxy upstream_zone/)->plan(6);
my $d = $t->testdir();

open my $fh, '<', '../README.md' or die "README.md: $!\n";
my $readme = do { local $/; <$fh> };
close $fh;
my ($section) = $readme =~ /^### Prometheus\n(.*?)^##/ms;
ok($section, 'README.md has a Prometheus section');
$section //= '';
my ($yaml) = $section =~ /```yaml\n(.*?)```/s;
like($yaml // '', qr/^scrape_configs:/m, 'with a scrape config');

SKIP: {
	my ($promtool) = grep { -x } '/usr/bin/promtool';
	skip('no promtool (Debian\'s prometheus package)', 1) unless $promtool;
	$t->write_file('prometheus.yml', $yaml // '');
	my $o = `$promtool check config $d/prometheus.yml 2>&1`;
	# Debian builds Prometheus without Kubernetes discovery: check the rest
	# (the relabelling) with the pod list given statically.
	if ($o =~ /field kubernetes_sd_configs not found/) {
		(my $static = $yaml) =~ s/kubernetes_sd_configs:\n(\s+)- role: pod\n/static_configs:\n$1- targets: ["pod:8081"]\n/;
		$t->write_file('prometheus.yml', $static);
		$o = `$promtool check config $d/prometheus.yml 2>&1`;
	}
	is($?, 0, 'promtool check config passes') or diag($o);
}

# The queries: metric{label="value"}.
my @uses = $section =~ /\b(sluice_\w+)\{(\w+)="([^"]*)"\}/g;
ok(@uses >= 6, 'the queries name metrics with labels');

$t->write_file_expand('sluice.conf', <<'EOF');

%%TEST_GLOBALS%%

events {
}

http {
    access_log off;
    upstream app {
        zone app 64k;
        server 127.0.0.1:%%PORT_8081%%;
        server 127.0.0.1:%%PORT_8089%% max_fails=1 fail_timeout=60s;
    }
    server {
        listen 127.0.0.1:%%PORT_8080%%;
        location /app/ { proxy_pass http://app/; }
        location = /metrics { metrics; }
    }
}

EOF
$t->backend(port(8081), status => 503);
$t->run();
# A 5xx answer, and a peer that fails (nothing listens on 8089): unavail.
http_get("/app/$_") for 1 .. 4;
my $m = http_get('/metrics') // '';
my @missing;
while (my ($name, $label, $value) = splice(@uses, 0, 3)) {
	push @missing, "$name\{$label=\"$value\"}" unless $m =~ /^\Q$name\E\{[^}]*\b\Q$label\E="\Q$value\E"/m;
}
is(join(' ', @missing), '', 'every metric and label the queries use is served');
like($m, qr/^sluice_upstream_peer_state\{[^}]*state="unavail"[^}]*\} 1$/m,
	'the failing peer shows as unavail, as the README says');
