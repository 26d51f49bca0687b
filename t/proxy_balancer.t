#!/usr/bin/perl

# Upstream balancers through the real binary, with nginx's worked examples:
# round robin 15/15 and 10/20, backup, down, max_fails windows and recovery,
# hash, ip_hash, least_conn.

use warnings;
use strict;

use Test::More;
use IO::Socket::INET;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;

my $t = Test::Sluice->new()->has(qw/http upstream_hash upstream_ip_hash upstream_least_conn/)->plan(13);

$t->write_file_expand('sluice.conf', <<'EOF');

%%TEST_GLOBALS%%

events {
}

http {
    access_log off;

    upstream rr { server 127.0.0.1:%%PORT_8081%%; server 127.0.0.1:%%PORT_8082%%; }
    upstream weighted { server 127.0.0.1:%%PORT_8081%%; server 127.0.0.1:%%PORT_8082%% weight=2; }
    upstream backup { server 127.0.0.1:%%PORT_8089%%; server 127.0.0.1:%%PORT_8082%% backup; }
    upstream down { server 127.0.0.1:%%PORT_8081%% down; server 127.0.0.1:%%PORT_8082%%; }
    upstream fails {
        server 127.0.0.1:%%PORT_8083%% max_fails=3 fail_timeout=10s;
        server 127.0.0.1:%%PORT_8082%%;
    }
    upstream recover {
        server 127.0.0.1:%%PORT_8084%% max_fails=1 fail_timeout=1s;
        server 127.0.0.1:%%PORT_8082%%;
    }
    upstream hash { hash $remote_addr; server 127.0.0.1:%%PORT_8081%%; server 127.0.0.1:%%PORT_8082%%; }
    upstream iphash { ip_hash; server 127.0.0.1:%%PORT_8081%%; server 127.0.0.1:%%PORT_8082%%; }
    upstream lc { least_conn; server 127.0.0.1:%%PORT_8081%%; server 127.0.0.1:%%PORT_8082%%; }
    upstream rnd { random two least_conn; server 127.0.0.1:%%PORT_8081%%; server 127.0.0.1:%%PORT_8082%%; }

    server {
        listen 127.0.0.1:%%PORT_8080%%;
        listen 127.0.0.2:%%PORT_8080%%;
        location /rr { proxy_pass http://rr; }
        location /weighted { proxy_pass http://weighted; }
        location /backup { proxy_pass http://backup; }
        location /down { proxy_pass http://down; }
        location /fails { proxy_pass http://fails; }
        location /recover { proxy_pass http://recover; }
        location /hash { proxy_pass http://hash; }
        location /iphash { proxy_pass http://iphash; }
        location /lc { proxy_pass http://lc; }
        location /rnd { proxy_pass http://rnd; }
        location /slow { proxy_pass http://lc; }
    }
}

EOF

$t->backend(port(8081));
$t->backend(port(8082));
$t->backend(port(8083), drop_every => 3, close => 1);
$t->run();

my ($p1, $p2, $p3) = (port(8081), port(8082), port(8083));

sub many {
	my ($uri, $n, %extra) = @_;
	my %c;
	for (1 .. $n) {
		my $r = http_get($uri, %extra);
		my ($p) = $r =~ /^X-Port: (\d+)/mi;
		$c{$p // 'none'}++;
	}
	return \%c;
}

my $c = many('/rr', 30);
is("$c->{$p1}/$c->{$p2}", '15/15', 'round robin 15/15');
$c = many('/weighted', 30);
is("$c->{$p1}/$c->{$p2}", '10/20', 'weights 1:2 give 10/20');
$c = many('/backup', 4);
is($c->{$p2}, 4, 'backup used when the primary is dead');
$c = many('/down', 6);
is($c->{$p2}, 6, 'down peer skipped');

# p3 drops every third connection; each failure is retried on p2; the third
# failure disables p3 for 10s.
$c = many('/fails', 30);
is(($c->{$p3} // 0) . '/' . ($c->{$p2} // 0), '6/24', 'max_fails=3 gives 6/24');
like($t->read_file('error.log'), qr/\[warn\] .*upstream server temporarily disabled/, 'disabled peer logged');

# A dead peer is skipped for fail_timeout, then tried again.
$c = many('/recover', 4);
is($c->{$p2}, 4, 'dead peer skipped');
$t->backend(port(8084));
select(undef, undef, undef, 1.2);
$c = many('/recover', 4);
ok($c->{port(8084)}, 'peer used again after fail_timeout');

$c = many('/hash', 6);
is($c->{$p2}, 6, 'hash $remote_addr 127.0.0.1 goes to the second peer');

# ip_hash over 127.0.i.2 for i = 1..30.
my %ip;
for my $i (1 .. 30) {
	my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1:' . port(8080),
		LocalAddr => "127.0.$i.2", Proto => 'tcp') or next;
	my $r = http("GET /iphash HTTP/1.0\nHost: localhost\n\n", socket => $s);
	my ($p) = $r =~ /^X-Port: (\d+)/mi;
	$ip{$p // 'none'}++;
}
is("$ip{$p1}/$ip{$p2}", '15/15', 'ip_hash 15/15 over 127.0.i.2');

$c = many('/lc', 10);
is("$c->{$p1}/$c->{$p2}", '5/5', 'least_conn alternates when idle');

# A long request on the first peer sends the next ones to the second.
my $slow = http("GET /slow/2 HTTP/1.0\nHost: localhost\n\n", start => 1);
select(undef, undef, undef, 0.3);
my $slow_peer;
{
	# The slow request went to whichever peer least_conn chose; find it.
	$c = many('/lc', 10);
	my @busy = grep { !$c->{$_} } ($p1, $p2);
	$slow_peer = $busy[0];
}
ok($slow_peer, 'least_conn avoids the busy peer');
http_end($slow);

$c = many('/rnd', 30);
ok($c->{$p1} && $c->{$p2} && $c->{$p1} + $c->{$p2} == 30, 'random two spreads over both peers');
