#!/usr/bin/perl

# Upstream zones with two workers: the peers' state is shared, so a failure
# seen by one worker disables the peer for the other, max_conns counts the
# connections of both, and least_conn and random two are steered by a
# connection the other worker holds. One zone serves several upstreams.
# Zone errors: too small, zero size, conflicting sizes, too many peers.

use warnings;
use strict;

use Test::More;
use IO::Select;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;

my $t = Test::Sluice->new()->has(qw/http upstream_zone/)->plan(17);
my $d = $t->testdir();

$t->write_file_expand('sluice.conf', <<'EOF');

%%TEST_GLOBALS%%

worker_processes 2;

events {
}

http {
    log_format w "$pid $uri $upstream_addr $status";
    access_log %%TESTDIR%%/access.log w;

    upstream zf {
        zone z 64k;
        server 127.0.0.1:%%PORT_8089%% max_fails=1 fail_timeout=60s;
        server 127.0.0.1:%%PORT_8082%%;
    }
    upstream zm { zone z; server 127.0.0.1:%%PORT_8081%% max_conns=1; }
    upstream zl { zone z; least_conn; server 127.0.0.1:%%PORT_8081%%; server 127.0.0.1:%%PORT_8082%%; }
    upstream zr { zone other 32k; random two; server 127.0.0.1:%%PORT_8081%%; server 127.0.0.1:%%PORT_8082%%; }

    server {
        listen 127.0.0.1:%%PORT_8080%% reuseport;
        location /zf { proxy_pass http://zf; }
        location /zm/ { proxy_pass http://zm/; }
        location /zl/ { proxy_pass http://zl/; }
        location /zr/ { proxy_pass http://zr/; }
    }
}

EOF

$t->backend(port(8081));
$t->backend(port(8082));
$t->run();

my @w = $t->worker_pids();
for (1 .. 50) { last if @w == 2; select(undef, undef, undef, 0.05); @w = $t->worker_pids(); }
is(scalar @w, 2, 'two workers');

my ($p1, $p2, $dead) = (port(8081), port(8082), port(8089));

# Which workers served requests for a URI prefix (from the access log).
sub pids_for {
	my ($prefix) = @_;
	my %p;
	for (split /\n/, $t->read_file('access.log')) {
		my ($pid, $uri) = split / /;
		$p{$pid}++ if defined $uri && index($uri, $prefix) == 0;
	}
	return scalar keys %p;
}

sub wait_logged {
	my ($prefix, $n) = @_;
	for (1 .. 100) {
		my $c = () = $t->read_file('access.log') =~ /^\d+ \Q$prefix\E/mg;
		return if $c >= $n;
		select(undef, undef, undef, 0.05);
	}
}

# 1. One failure, seen by one worker, disables the peer for both.
my $ok = 0;
for (1 .. 20) {
	$ok++ if http_get('/zf') =~ /^HTTP\/1.1 200/;
}
is($ok, 20, 'failed peer retried on the other');
wait_logged('/zf', 20);
is(pids_for('/zf'), 2, 'both workers served /zf');
my $refused = () = $t->read_file('error.log') =~ /connect\(\) failed \(111: Connection refused\).*127\.0\.0\.1:$dead/g;
is($refused, 1, 'the dead peer was tried once in all (shared max_fails)');

# 2. max_conns=1 counts the connections of both workers.
my @s = map { http("GET /zm/slow/1 HTTP/1.0\nHost: localhost\n\n", start => 1) } 1 .. 16;
my %st;
for my $s (@s) {
	my ($code) = http_end($s) =~ /^HTTP\/1.1 (\d+)/;
	$st{$code // 'none'}++;
}
is($st{200} // 0, 1, 'max_conns=1 across workers: one answered');
is($st{502} // 0, 15, 'the others found no live upstream');
wait_logged('/zm', 16);
is(pids_for('/zm'), 2, 'both workers served /zm');

# 3. A connection held through one worker steers the other's least_conn and
# random two.
for my $u (qw/zl zr/) {
	my $slow = http("GET /$u/slow/2 HTTP/1.0\nHost: localhost\n\n", start => 1);
	select(undef, undef, undef, 0.3);
	my %c;
	for (1 .. 16) {
		my ($p) = http_get("/$u/quick") =~ /^X-Port: (\d+)/mi;
		$c{$p // 'none'}++;
	}
	my ($held) = http_end($slow) =~ /^X-Port: (\d+)/mi;
	my @ports = keys %c;
	ok(@ports == 1 && defined $held && $ports[0] ne $held,
		"$u: every quick request avoided the peer held elsewhere");
	wait_logged("/$u/quick", 16);
	is(pids_for("/$u/quick"), 2, "$u: both workers served");
}

$t->stop();

# 4. Zone errors, as nginx words them, with the file and line.
sub conf_error {
	my ($zone_lines) = @_;
	$t->write_file('bad.conf', "events {}\nhttp {\n$zone_lines\n}\n");
	my ($rc, $out, $err) = $t->run_binary('-p', "$d/", '-c', 'bad.conf', '-t');
	return $rc ? $err : '';
}

like(conf_error("upstream u { zone z 16k; server 127.0.0.1:1; }"),
	qr/\[emerg\] zone "z" is too small in .*bad\.conf:3/, 'too small a zone');
like(conf_error("upstream u { zone z; server 127.0.0.1:1; }"),
	qr/\[emerg\] zero size shared memory zone "z"/, 'a zone without a size');
like(conf_error("upstream u { zone z 64k; server 127.0.0.1:1; }\n"
	. "upstream v { zone z 128k; server 127.0.0.1:2; }"),
	qr/\[emerg\] the size 131072 of shared memory zone "z" conflicts with already declared size 65536 in .*bad\.conf:4/,
	'conflicting zone sizes');
like(conf_error("upstream u { zone z 64k; zone y 64k; server 127.0.0.1:1; }"),
	qr/\[emerg\] "zone" directive is duplicate/, 'zone twice in an upstream');

# Too small even for the server lines: refused at start-up.
my $lines = join '', map { "server 127.0.0.1:" . (1000 + $_) . ";\n" } 1 .. 100;
$t->write_file('huge.conf', "events {}\nhttp {\nupstream u { zone z 32k;\n$lines }\n}\n");
my ($hrc, $hout, $herr) = $t->run_binary('-p', "$d/", '-c', 'huge.conf', '-e', 'huge.log');

ok($hrc != 0 && $t->read_file('huge.log') =~ /\[emerg\] \d+#\d+: zone "z" of 32768 bytes is too small for its upstreams: \d+ bytes needed/,
	'zone too small for its server lines: refused at start');

# 5. A zone too small for its peers keeps those that fit and says why.
# 60 server lines: their records fit in 32k, not all their peers.
my $servers = join '', map { "server 127.0.0.1:" . (1000 + $_) . ";\n" } 1 .. 60;
my $t2 = Test::Sluice->new();
$t2->write_file_expand('sluice.conf', <<"EOF");
%%TEST_GLOBALS%%
events {}
http {
    upstream many { zone small 32k; $servers }
    server { listen 127.0.0.1:%%PORT_8080%%; location / { return 200; } }
}
EOF
$t2->run();
ok($t2->waitforlog(qr/\[error\].*zone "small" is too small for the peers of upstream "many": \d+ of them not added, \d+ bytes needed/, 5),
	'zone too small for its peers: [error] with the size needed');
$t2->stop();
