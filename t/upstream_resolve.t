#!/usr/bin/perl

# server NAME resolve with two workers: peers follow a test DNS server's
# answers (A, AAAA, CNAME chains, truncated replies over TCP); NXDOMAIN and
# empty answers remove the peers, errors and timeouts keep them; one worker
# holds the resolver lease and another takes over when it is killed; the
# API shows the resolve state. Config errors without a zone or resolver.

use warnings;
use strict;

use Test::More;
use JSON::PP;
use Time::HiRes qw/time sleep/;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;

my $t = Test::Sluice->new()->has(qw/http upstream_zone/)->plan(35);
$t->expect_errors(qr/\[alert\].*worker process \d+ exited on signal 9/);
my $d = $t->testdir();

$t->write_file_expand('sluice.conf', <<'EOF');

%%TEST_GLOBALS%%

worker_processes 2;

events {
}

http {
    log_format u "$uri $status $upstream_addr";
    access_log %%TESTDIR%%/access.log u;
    resolver 127.0.0.1:%%PORT_8053%% valid=1s;
    resolver_timeout 1s;

    upstream app { zone z 64k; server app.test:%%PORT_8081%% resolve; }
    upstream alias { zone z; server alias.test:%%PORT_8081%% resolve; }
    upstream six { zone z; server six.test:%%PORT_8081%% resolve; }
    upstream srv { zone z; server srv.test service=http resolve; }
    upstream four {
        zone z;
        resolver 127.0.0.1:%%PORT_8053%% ipv6=off;
        server four.test:%%PORT_8081%% resolve;
    }
    upstream count {
        zone z;
        resolver 127.0.0.1:%%PORT_8053%%;
        server count.test:%%PORT_8081%% resolve;
    }

    server {
        listen 127.0.0.1:%%PORT_8080%% reuseport;
        location /app { proxy_pass http://app; }
        location /alias { proxy_pass http://alias; }
        location /srv { proxy_pass http://srv; }
        location /dyn { proxy_pass http://$arg_h:%%PORT_8081%%; }
        location /dynup { proxy_pass http://$arg_u; }
        location /dynuri { proxy_pass http://127.0.0.1:%%PORT_8081%%/fixed$is_args$args; }
        location /api { api; }
    }
}

EOF

my $p = port(8081);

# The DNS answers: the other names stay as they are, app.test changes.
sub answers {
	$t->write_file('dns.txt', join('', map { "$_\n" } @_,
		'alias.test CNAME real.test 5', 'real.test A 127.0.0.2 5',
		'six.test AAAA ::1 5', 'count.test A 127.0.0.1 60',
		"_http._tcp.srv.test SRV 10 5 $p a.test 5", "_http._tcp.srv.test SRV 20 0 $p b.test 5",
		'a.test A 127.0.0.1 5', 'b.test A 127.0.0.2 5', 'dyn.test A 127.0.0.2 60',
		'four.test A 127.0.0.1 60'));
}
answers('app.test A 127.0.0.1 1');
$t->dns(port(8053));
$t->backend($p);
$t->backend($p, addr => '127.0.0.2');
$t->run();

sub addr_of { backend_addr($_[0]) }

# Polls until `addr_of($uri)` gives $want (true) or 6 s pass.
sub becomes {
	my ($uri, $want) = @_;
	return poll_until(sub { addr_of($uri) eq $want });
}

sub api {
	my $r = http_get('/api/9/http/upstreams');
	my ($body) = $r =~ /\r\n\r\n(.*)\z/s;
	return eval { decode_json($body) } // {};
}

sub dns_log { $t->read_file('dns.log') }

ok(becomes('/app/1', '127.0.0.1'), 'first answer: peer 127.0.0.1');
like(dns_log(), qr/^app\.test A udp$/m, 'A query');
like(dns_log(), qr/^app\.test AAAA udp$/m, 'and AAAA query');

answers('app.test A 127.0.0.2 1');
ok(becomes('/app/2', '127.0.0.2'), 'the answer changed: the peer followed');

# Live state stays with a peer whose address is answered again.
sub requests_of {
	my ($addr) = @_;
	my ($peer) = grep { $_->{server} eq "$addr:$p" } @{api()->{app}{peers} // []};
	return $peer ? $peer->{requests} : -1;
}
addr_of('/app/2b') for 1 .. 5;
my $before = requests_of('127.0.0.2');
answers('app.test A 127.0.0.1 1', 'app.test A 127.0.0.2 1');
my %seen;
for (1 .. 60) {
	$seen{addr_of('/app/3')}++;
	last if $seen{'127.0.0.1'} && $seen{'127.0.0.2'};
	sleep 0.1;
}
ok($seen{'127.0.0.1'} && $seen{'127.0.0.2'}, 'two addresses: both peers used');
ok($before >= 6 && requests_of('127.0.0.2') >= $before,
	"a peer still answered keeps its counters ($before requests before)");

# Errors keep the last good peers.
answers('app.test RCODE 2');
ok($t->waitforlog(qr/\[error\].*app\.test could not be resolved \(2: Server failure\)/, 6),
	'SERVFAIL logged as nginx');
my $kept = 0;
$kept++ for grep { addr_of('/app/4') ne 'down' } 1 .. 4;
is($kept, 4, 'SERVFAIL keeps the peers');

answers('app.test SILENT');
ok($t->waitforlog(qr/\[error\].*app\.test could not be resolved \(110: Operation timed out\)/, 6),
	'no reply: timed out after resolver_timeout');
isnt(addr_of('/app/5'), 'down', 'a timeout keeps the peers');

# NXDOMAIN, and NOERROR with no address in either family, remove them.
answers('app.test RCODE 3');
ok(becomes('/app/6', 'down'), 'NXDOMAIN: no peers, 502');
ok($t->waitforlog(qr/\[error\].*app\.test could not be resolved \(3: Host not found\)/, 1),
	'NXDOMAIN logged as nginx');
like($t->read_file('access.log'), qr/^\/app\/6 502 app$/m, '$upstream_addr is the upstream name');

answers('app.test A 127.0.0.1 1');
ok(becomes('/app/7', '127.0.0.1'), 'back');
answers();
ok(becomes('/app/8', 'down'), 'an empty answer removes the peers too');

# A CNAME alone is chased; a truncated reply is asked again over TCP.
is(addr_of('/alias/1'), '127.0.0.2', 'CNAME chain followed');
like(dns_log(), qr/^real\.test A udp$/m, 'the CNAME target queried');
answers('app.test TC', 'app.test A 127.0.0.2 1');
ok(becomes('/app/9', '127.0.0.2'), 'truncated over UDP: answered over TCP');
like(dns_log(), qr/^app\.test A tcp$/m, 'TCP query');

# AAAA answers; the API shows the resolve state and the lease holder.
my ($six, $pid);
for (1 .. 30) {
	my $v = api();
	$six = $v->{six}{sluice}{resolve}[0];
	$pid = $v->{app}{sluice}{resolver_pid};
	last if $six && @{$six->{addresses} // []};
	sleep 0.1;
}
is(join(',', @{$six->{addresses} // []}), "[::1]:$p", 'AAAA answer: [::1] peer');
my @w = $t->worker_pids();
ok($pid && grep({ $_ == $pid } @w), 'the resolver is one of the workers');

# Only the lease holder queries: count.test has its own resolver, without
# valid=, and a 60 s TTL, so one worker
# asks once; two would ask twice.
my $count = () = dns_log() =~ /^count\.test A udp$/mg;
my $count6 = () = dns_log() =~ /^count\.test AAAA udp$/mg;
is("$count $count6", '1 1', 'one resolving worker, one A and one AAAA query per lookup');
ok(dns_log() =~ /^four\.test A udp$/m && dns_log() !~ /^four\.test AAAA/m,
	'ipv6=off: no AAAA query');
my $alias = () = dns_log() =~ /^alias\.test A udp$/mg;
my $real = () = dns_log() =~ /^real\.test A udp$/mg;
ok($alias >= 2 && abs($alias - $real) <= 1, "a CNAME-only answer costs a second pair of queries ($alias, $real)");

# SRV: the lowest priority gives the primary peers, the others backups;
# the record's weight (0 taken as 1) and port.
my $srv = [];
for (1 .. 30) {
	$srv = api()->{srv}{peers} // [];
	last if @$srv == 2;
	sleep 0.1;
}
my ($prim) = grep { !$_->{backup} } @$srv;
my ($bak) = grep { $_->{backup} } @$srv;
ok($prim && $prim->{server} eq "127.0.0.1:$p" && $prim->{weight} == 5
	&& $bak && $bak->{server} eq "127.0.0.2:$p" && $bak->{weight} == 1,
	'SRV: primary and backup peers with the records\' ports and weights');
is(addr_of('/srv/1'), '127.0.0.1', 'SRV: the primary answers');
like(dns_log(), qr/^_http\._tcp\.srv\.test SRV udp$/m, 'SRV query for _http._tcp');

# proxy_pass with variables: a name looked up (and cached), an address, an
# upstream block's name, a URI part sent as it is.
my $dyn = 0;
$dyn++ for grep { http_get('/dyn?h=dyn.test') =~ /^X-Addr: 127\.0\.0\.2\r$/m } 1 .. 6;
is($dyn, 6, 'proxy_pass with variables: the name resolved');
my $asked = () = dns_log() =~ /^dyn\.test A udp$/mg;
ok($asked >= 1 && $asked <= 2, "answers cached per worker ($asked lookups for 6 requests)");
like(http_get('/dyn?h=127.0.0.2'), qr/^X-Addr: 127\.0\.0\.2\r$/m, 'an address');
like(http_get('/dyn?h=nx.test'), qr/^HTTP\/1.1 502/, 'an unknown name: 502');
ok($t->waitforlog(qr/\[error\].*nx\.test could not be resolved \(3: Host not found\), client/, 2),
	'logged with the request');
like(http_get('/dynup?u=srv'), qr/^HTTP\/1.1 200/, 'an upstream block by name');
like(http_get('/dynuri?a=1'), qr/\r\n\r\n\d+ \/fixed\?a=1$/, 'the URI part sent as it is');

# The holder dies: another worker takes the lease and follows DNS.
kill 'KILL', $pid;
answers('app.test A 127.0.0.1 1');
my $new;
for (1 .. 60) {
	$new = api()->{app}{sluice}{resolver_pid};
	last if $new && $new != $pid;
	sleep 0.1;
}
ok($new && $new != $pid && becomes('/app/10', '127.0.0.1'),
	'the lease moved to another worker, which resolves');

$t->stop();
