#!/usr/bin/perl

# deploy/kubernetes/configmap.yaml's sluice.conf, run as it is but for its
# addresses: the test DNS server answers what CoreDNS answers for the
# example Services (TTL 5 s): the headless Service's name with one A record
# per pod, its _http._tcp SRV records with the pods' port and dashed-IP
# targets, the ClusterIP Service's name with one address. Requests spread
# over the three pods through A and through SRV (on the SRV port), the
# ClusterIP upstream holds keepalive_min connections per worker, and a pod
# that leaves the answers stops getting requests. The ConfigMap's reload.sh
# (the reloader sidecar's loop) sends HUP when the file changes and does
# not for a configuration that fails -t.

use warnings;
use strict;

use Test::More;
use Time::HiRes qw/sleep/;
use Cwd qw/abs_path/;
use POSIX ();

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;

plan(skip_all => 'no /proc/net/tcp') unless -r '/proc/net/tcp';
plan(skip_all => 'the configuration runs workers as another user: needs root') if $> != 0;
my $t = Test::Sluice->new()->has(qw/http proxy upstream_zone/)->plan(22);
my $d = $t->testdir();

# The ConfigMap's data: each key a literal block indented four spaces.
my %data;
{
	open my $fh, '<', '../deploy/kubernetes/configmap.yaml' or die "configmap.yaml: $!\n";
	my $key;
	while (my $l = <$fh>) {
		if ($l =~ /^  ([\w.-]+): \|$/) {
			$key = $1;
			$data{$key} = '';
		} elsif (defined $key && ($l =~ /^    (.*\n)/ || $l =~ /^(\n)$/)) {
			$data{$key} .= $1;
		} else {
			undef $key;
		}
	}
}
my $conf = $data{'sluice.conf'} // '';

# The shapes the README explains.
like($conf, qr/^\s*resolver kube-dns\.kube-system\.svc\.cluster\.local valid=5s;/m,
	'the resolver: kube-dns by name');
like($conf, qr/server backend-headless\.default\.svc\.cluster\.local:8080 resolve\b/,
	'the headless Service with resolve');
like($conf, qr/server backend-headless\.default\.svc\.cluster\.local service=http resolve;/,
	'the headless Service through SRV');
like($conf, qr/server backend\.default\.svc\.cluster\.local:8080 resolve;.*keepalive_min 8;/s,
	'the ClusterIP Service with keepalive_min');

# Loopback for the cluster: the test DNS server for kube-dns, ports for the
# listeners and pods, the test's globals and files for the container's.
my $p = port(8090);
my $srvp = port(8091);
my $mime = abs_path('../conf/mime.types');
my $g = $t->test_globals();
my $n = 0;
$n += $conf =~ s/^\s*pid [^;]*;\n//m;
$n += $conf =~ s/^\s*error_log [^;]*;\n//m;
$n += $conf =~ s/^(\s*)user sluice;/${1}user nobody;/m;
$n += $conf =~ s{include /etc/sluice/mime\.types;}{include $mime;};
$n += $conf =~ s{access_log /var/log/sluice/access\.log combined;}{access_log $d/access.log combined;};
$n += $conf =~ s/resolver kube-dns\.kube-system\.svc\.cluster\.local/'resolver 127.0.0.1:' . port(8053)/e;
$n += $conf =~ s/listen 8080 /'listen 127.0.0.1:' . port(8080) . ' '/e;
$n += $conf =~ s/listen 8081;/'listen 127.0.0.1:' . port(8082) . ';'/e;
$n += $conf =~ s/svc\.cluster\.local:8080 /svc.cluster.local:$p /g;
is($n, 10, 'every address and path found to move to the test');
mkdir "$d/k8s";
$t->write_file('k8s/sluice.conf', $g . $conf);

my $h = 'backend-headless.default.svc.cluster.local';
sub answers {
	my @pods = @_;
	$t->write_file('dns.txt', join('', map { "$_\n" }
		(map { "$h A $_ 5" } @pods),
		(map { (my $n = $_) =~ tr/./-/; "_http._tcp.$h SRV 0 33 $srvp $n.$h 5" } @pods),
		(map { (my $n = $_) =~ tr/./-/; "$n.$h A $_ 5" } @pods),
		'backend.default.svc.cluster.local A 127.0.0.4 5'));
}
answers(map { "127.0.0.$_" } 1 .. 3);
$t->dns(port(8053));
for my $i (1 .. 3) {
	$t->backend($p, addr => "127.0.0.$i");
	$t->backend($srvp, addr => "127.0.0.$i");
}
$t->backend($p, addr => '127.0.0.4');

my ($rc, undef, $err) = $t->run_binary('-t', '-p', "$d/", '-c', "$d/k8s/sluice.conf");
is($rc, 0, 'the ConfigMap\'s configuration passes -t') or diag($err);
$t->run(conf => 'k8s/sluice.conf');

# Which pod (and port) answered.
sub pod {
	my ($uri) = @_;
	my $r = http_get($uri) // '';
	return 'error' unless $r =~ /^HTTP\/1\.1 200/;
	my ($a) = $r =~ /^X-Addr: (\S+)/mi;
	my ($port) = $r =~ /^X-Port: (\d+)/mi;
	return ($a // '?') . ':' . ($port // '?');
}

# The pods seen in 30 requests once all of @want have answered (6 s at most).
sub spread {
	my ($uri, @want) = @_;
	my %seen;
	poll_until(sub {
		%seen = ();
		$seen{pod($uri)}++ for 1 .. 30;
		!grep { !$seen{$_} } @want;
	}, 8);
	return join(' ', sort keys %seen);
}

my @three = map { "127.0.0.$_" } 1 .. 3;
is(spread('/a', map { "$_:$p" } @three), join(' ', map { "$_:$p" } @three),
	'headless A records: requests spread over the three pods');
is(spread('/srv/a', map { "$_:$srvp" } @three), join(' ', map { "$_:$srvp" } @three),
	'SRV: the three pods, on the port the records give');
is(pod('/clusterip/a'), "127.0.0.4:$p", 'ClusterIP: the Service address');
like($t->read_file('dns.log'), qr/^_http\._tcp\.\Q$h\E SRV udp$/m, 'the SRV query as CoreDNS names it');

# keepalive_min 8 in each of the two workers, to the one ClusterIP address.
sub established {
	my ($ip, $port) = @_;
	my $want = sprintf('%s:%04X', join('', map { sprintf '%02X', $_ } reverse split /\./, $ip), $port);
	my $c = 0;
	open my $fh, '<', '/proc/net/tcp' or return 0;
	while (<$fh>) {
		my @f = split;
		$c++ if ($f[2] // '') eq $want && ($f[3] // '') eq '01';
	}
	return $c;
}
ok(poll_until(sub { established('127.0.0.4', $p) >= 16 }, 8),
	'ClusterIP: 16 connections kept open (keepalive_min 8, two workers)');

# A pod goes: its A and SRV records go (after the 5 s the answers are
# valid), and so do its requests.
answers(map { "127.0.0.$_" } 1 .. 2);
my @two = map { "127.0.0.$_" } 1 .. 2;
ok(poll_until(sub { spread('/b', map { "$_:$p" } @two) eq join(' ', map { "$_:$p" } @two) }, 12),
	'headless: the pod that left gets no more requests');
ok(poll_until(sub { spread('/srv/b', map { "$_:$srvp" } @two) eq join(' ', map { "$_:$srvp" } @two) }, 12),
	'SRV: the pod that left gets no more requests');
answers(@three);
is(spread('/c', map { "$_:$p" } @three), join(' ', map { "$_:$p" } @three), 'and back when it returns');

# The reloader's loop, on the test's files.
my $script = $data{'reload.sh'} // '';
like($script, qr/-s reload/, 'reload.sh sends the reload through sluice -s');
$t->write_file('reload.sh', $script);
my $rlog = "$d/reloader.log";
$t->run_daemon(sub {
	open STDOUT, '>>', $rlog or POSIX::_exit(1);
	open STDERR, '>>', $rlog or POSIX::_exit(1);
	$ENV{SLUICE} = Test::Sluice::binary();
	$ENV{SLUICE_CONF_DIR} = "$d/k8s";
	$ENV{SLUICE_PREFIX} = "$d/";
	$ENV{INTERVAL} = 1;
	exec('/bin/sh', "$d/reload.sh") or POSIX::_exit(127);
});
sleep 1.5;
sub healthz { http_get('/healthz', PeerAddr => '127.0.0.1:' . port(8082)) // '' }
like(healthz(), qr/\r\n\r\nok\n\z/, 'the probe location answers');
my $gens = $t->log_count(qr/start worker processes/);

(my $bad = $g . $conf) =~ s/return 200 "ok\\n";/return 200 "ok\\n"; nonsense;/ or fail('healthz line');
$t->write_file('k8s/sluice.conf', $bad);
ok($t->waitforlog(qr/not loaded/, 5, 'reloader.log'), 'a bad configuration: the reloader says so');
like($t->read_file('reloader.log'), qr/unknown directive "nonsense" in \S+sluice\.conf:\d+/,
	'with -t\'s file:line');
is($t->log_count(qr/start worker processes/), $gens, 'and sends no HUP');

(my $good = $g . $conf) =~ s/return 200 "ok\\n";/return 200 "ok, reloaded\\n";/;
$t->write_file('k8s/sluice.conf', $good);
ok($t->waitforlog(qr/HUP sent/, 5, 'reloader.log'), 'a good one: the reloader sends HUP');
ok(poll_until(sub { healthz() =~ /ok, reloaded/ }), 'the new configuration serves');
is($t->log_count(qr/start worker processes/), $gens + 1, 'one reload');
$t->stop_daemons();
$t->stop();
