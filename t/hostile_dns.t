#!/usr/bin/perl

# A DNS server that misbehaves, against `server NAME resolve` with two
# workers: truncated replies, wrong IDs, answers to another question,
# compression pointer loops and pointers past the end, records of the other
# family or of other types, SERVFAIL and REFUSED are logged as nginx logs
# them and ignored: the last good peers keep serving, and the workers do
# not restart. NXDOMAIN still removes the peers (nginx's rule). Huge TTLs:
# with the top bit set a TTL is 0 (the name is asked again at once, by the
# upstream and by proxy_pass with variables), and a TTL is believed for a
# day at most, also when read from a state file at a cold start. An answer
# with hundreds of records is used; one too big for a UDP reply is not.

use warnings;
use strict;

use Test::More;
use JSON::PP;
use Time::Local qw/timegm/;
use Time::HiRes qw/time sleep/;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;

my $t = Test::Sluice->new()->has(qw/http upstream_zone/)->plan(33);
my $d = $t->testdir();

$t->write_file_expand('sluice.conf', <<'EOF');

%%TEST_GLOBALS%%

worker_processes 2;

events {
}

http {
    access_log off;
    resolver 127.0.0.1:%%PORT_8053%%;
    resolver_timeout 1s;

    upstream app { zone z 1m; server app.test:%%PORT_8081%% resolve; }
    upstream long {
        zone z;
        state %%TESTDIR%%/long.state;
        server long.test:%%PORT_8081%% resolve;
    }
    upstream cold {
        zone z;
        resolver 127.0.0.1:%%PORT_8053%% valid=1s;
        state %%TESTDIR%%/cold.state;
        server cold.test:%%PORT_8081%% resolve;
    }

    server {
        listen 127.0.0.1:%%PORT_8080%%;
        location /app { proxy_pass http://app; }
        location /cold { proxy_pass http://cold; }
        location /dyn { proxy_pass http://$arg_h:%%PORT_8081%%; }
        location /api { api; }
    }
}

EOF

my $p = port(8081);
my $dns = port(8053);

# The answers: app.test's change, the others stay.
sub answers {
	$t->write_file('dns.txt', join('', map { "$_\n" } @_,
		'long.test A 127.0.0.1 2147483647', 'cold.test A 127.0.0.1 1',
		'dyn.test A 127.0.0.1 2147483648'));
}

# A cold start: the state file says cold.test is 127.0.0.2 until 2100.
$t->write_file('cold.state', "cold.test - 127.0.0.2:$p 1 0 4102444800000\n");
answers('app.test A 127.0.0.2 1');
$t->dns($dns);
$t->backend($p);
$t->backend($p, addr => '127.0.0.2');
$t->run();

sub becomes {
	my ($uri, $want, $secs) = @_;
	return poll_until(sub { backend_addr($uri) eq $want }, $secs);
}

sub api {
	my $r = http_get('/api/9/http/upstreams');
	my ($body) = $r =~ /\r\n\r\n(.*)\z/s;
	return eval { decode_json($body) } // {};
}

sub queries {
	my ($re) = @_;
	my $n = () = $t->read_file('dns.log') =~ /$re/mg;
	return $n;
}

###############################################################################

ok(becomes('/cold', '127.0.0.1', 6),
	'a state file\'s expiry in 2100 is clamped to valid=: the name is asked again');
ok(becomes('/app', '127.0.0.2'), 'first answer: peer 127.0.0.2');
my @workers = $t->worker_pids();
is(scalar @workers, 2, 'two workers');

# Each hostile reply carries 127.0.0.1: were it used, the peer would change.
# The reply is logged and ignored, the lookup times out, the peer stays.
my $timeouts = qr/\[error\].*app\.test could not be resolved \(110: Operation timed out\)/;
my $server = qr/, resolver: 127\.0\.0\.1:$dns$/m;
my @cases = (
	['shorter than a header', ['SHORT 8'], qr/\[error\].*short DNS response$server/],
	['cut in a record', ['SHORT 36'], qr/\[error\].*short DNS response$server/],
	['wrong ID', ['WRONGID'],
		qr/\[error\].*wrong ident \d+ response for app\.test, expect \d+$server/],
	['another question', ['QUESTION other.test'],
		qr/\[error\].*unexpected response for other\.test$server/],
	['pointer loop', ['LOOP'], qr/\[error\].*compression pointers loop$server/],
	['pointer past the end', ['PASTEND'], qr/\[error\].*name is out of response$server/],
	['AAAA in an A answer', ['RR 28 00000000000000000000000000000001'],
		qr/\[error\].*unexpected AAAA record in DNS response for app\.test$server/],
	['A in an AAAA answer', ['RR 1 7f000001'],
		qr/\[error\].*unexpected A record in DNS response for app\.test$server/],
	['only a TXT record', ['RR 16 0474657374'],
		qr/\[error\].*no A or CNAME types in DNS response for app\.test$server/],
	['SERVFAIL', ['RCODE 2'],
		qr/\[error\].*app\.test could not be resolved \(2: Server failure\)/],
	['REFUSED', ['RCODE 5'],
		qr/\[error\].*app\.test could not be resolved \(5: Operation refused\)/],
);
for my $c (@cases) {
	my ($what, $rules, $log) = @$c;
	my $bad = grep { /^(RR|RCODE|SHORT 8)/ } @$rules;
	# From the good peer (at once, unless an earlier case lost it).
	answers('app.test A 127.0.0.2 1');
	becomes('/app', '127.0.0.2');
	my ($logged, $failed) = ($t->log_count($log), $t->log_count($timeouts));
	answers(($bad ? () : 'app.test A 127.0.0.1 1'), map { "app.test $_" } @$rules);
	my $seen = poll_until(sub {
		$t->log_count($log) > $logged
			&& ($log =~ /could not/ || $t->log_count($timeouts) > $failed)
	}, 8);
	my @got = map { backend_addr("/app/$_") } 1 .. 4;
	ok($seen && "@got" eq join(' ', ('127.0.0.2') x 4),
		"$what: logged, the last good peer serves (@got)");
}
is(scalar @{api()->{app}{peers} // []}, 1, 'no peer added on the way');

# A record of another type beside the addresses is skipped (and logged).
answers('app.test RR 16 0474657374', 'app.test A 127.0.0.1 1');
ok(becomes('/app', '127.0.0.1'), 'TXT beside an A record: the address used');
ok($t->waitforlog(qr/\[error\].*unexpected RR type 16 in DNS response for app\.test$server/, 2),
	'the TXT record logged');

# TTLs with the top bit set are 0: the next answer is followed at once
# (it would be in 2094 or 2161 otherwise).
for my $ttl (4294967295, 2147483648) {
	answers("app.test A 127.0.0.1 $ttl");
	ok(becomes('/app', '127.0.0.1'), "TTL $ttl: answer used");
	answers('app.test A 127.0.0.2 1');
	ok(becomes('/app', '127.0.0.2', 5), "TTL $ttl taken as 0: asked again soon");
}

# A TTL of 68 years is believed for a day: the API and the state file. The
# name was resolved at start; on a loaded machine minutes may have passed.
my $day = 86400;
my $long;
poll_until(sub { ($long) = grep { $_->{expires} } @{api()->{long}{sluice}{resolve} // []}; $long }, 5);
my ($y, $mo, $dd, $h, $mi, $s) = ($long->{expires} // '') =~ /^(\d+)-(\d+)-(\d+)T(\d+):(\d+):(\d+)/;
my $left = defined $s ? timegm($s, $mi, $h, $dd, $mo - 1, $y) - time() : -1;
ok($left > $day - 600 && $left <= $day + 1, "API: TTL 2147483647 expires in a day ($left s)");
my ($until) = $t->read_file('long.state') =~ /^long\.test - \S+ \d \d (\d+)$/m;
$left = defined $until ? $until / 1000 - time() : -1;
ok($left > $day - 600 && $left <= $day + 1, "state file: the same ($left s)");

# proxy_pass with variables: a top-bit TTL is not cached.
my $before = queries(qr/^dyn\.test A udp$/m);
my $ok = grep { http_get('/dyn?h=dyn.test') =~ /^HTTP\/1.1 200/ } 1 .. 3;
my $asked = queries(qr/^dyn\.test A udp$/m) - $before;
ok($ok == 3 && $asked >= 3, "proxy_pass with variables: asked for each request ($asked)");

# Hundreds of records: all used (duplicates as duplicate peers).
answers(map { 'app.test A 127.0.0.' . (1 + $_ % 2) . ' 1' } 1 .. 250);
ok(poll_until(sub { @{api()->{app}{peers} // []} == 250 }, 6), "250 records: 250 peers");
my %got;
$got{backend_addr("/app/$_")}++ for 1 .. 6;
ok($got{'127.0.0.1'} && $got{'127.0.0.2'} && keys %got == 2, 'both addresses serve');

# Too many for a UDP reply of 4096 bytes: short, ignored, peers kept.
my $short = $t->log_count(qr/short DNS response/);
answers(map { 'app.test A 127.0.0.3 1' } 1 .. 600);
ok(poll_until(sub { $t->log_count(qr/short DNS response/) > $short }, 6),
	'600 records over UDP: short DNS response');
my @peers = @{api()->{app}{peers} // []};
ok(@peers == 250 && !grep({ $_->{server} =~ /127\.0\.0\.3/ } @peers), 'the 250 peers stay');
like(http_get('/app/last'), qr/^HTTP\/1.1 200/, 'and serve');

# NXDOMAIN is authoritative (as nginx): the peers go.
answers('app.test RCODE 3');
ok(becomes('/app', 'down'), 'NXDOMAIN removes the peers');
ok($t->waitforlog(qr/\[error\].*app\.test could not be resolved \(3: Host not found\)/, 1),
	'NXDOMAIN logged');

is(join(' ', $t->worker_pids()), join(' ', @workers), 'no worker restarted');
unlike($t->read_file('error.log'), qr/\[(alert|crit)\]|panicked/, 'no alert, no panic');

$t->stop();
