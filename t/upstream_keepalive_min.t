#!/usr/bin/perl

# keepalive_min behind a layer-4 balancer: four backends behind one address
# (sluice's own stream proxy, round robin per connection, as HAProxy in
# mode tcp or a ClusterIP in IPVS mode would), an HTTP upstream pointing at
# that one address. keepalive_min 8 opens eight connections and hands them
# out least recently used first, so one client's sequential requests reach
# every backend; without it the most recently used connection takes them all
# (the skew is printed, not asserted). Then a rolling restart: two backends
# stop and come back, and keepalive_time 2s jitter=20% recycles the
# connections that piled onto the others. The API shows the connections.

use warnings;
use strict;

use Test::More;
use IO::Socket::INET;
use Time::HiRes qw/time sleep/;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;

my $t = Test::Sluice->new()->has(qw/http proxy stream upstream_zone/)->plan(15);

$t->write_file_expand('sluice.conf', <<'EOF');

%%TEST_GLOBALS%%

events {
}

stream {
    upstream vip {
        server 127.0.0.1:%%PORT_8081%% max_fails=0;
        server 127.0.0.1:%%PORT_8082%% max_fails=0;
        server 127.0.0.1:%%PORT_8083%% max_fails=0;
        server 127.0.0.1:%%PORT_8084%% max_fails=0;
    }
    server { listen 127.0.0.1:%%PORT_8090%%; proxy_pass vip; }
}

http {
    access_log off;

    upstream spread {
        zone spread 64k;
        server 127.0.0.1:%%PORT_8090%%;
        keepalive_min 8;
        keepalive_time 2s jitter=20%;
    }
    upstream plain {
        server 127.0.0.1:%%PORT_8090%%;
    }

    server {
        listen 127.0.0.1:%%PORT_8080%%;
        location /spread/ { proxy_pass http://spread; }
        location /plain/ { proxy_pass http://plain; }
        location /api/ { api; }
    }
}

EOF

my @ports = map { port($_) } 8081 .. 8084;
$t->backend($_) for @ports;
$t->run();

sub peer {
	my $j = http_get('/api/9/http/upstreams/spread') // '';
	my ($open) = $j =~ /"open":(\d+)/;
	my ($idle) = $j =~ /"idle":(\d+)/;
	my ($avg) = $j =~ /"age_avg_ms":(\d+)/;
	my ($max) = $j =~ /"age_max_ms":(\d+)/;
	my ($rec) = $j =~ /"recycled":(\d+)/;
	return { open => $open // -1, idle => $idle // -1, avg => $avg // -1,
		max => $max // -1, recycled => $rec // -1 };
}

# Which backend answered each of $n sequential requests on one client
# connection: counts by port.
sub spread {
	my ($path, $n) = @_;
	my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1:' . port(8080)) or die "connect: $!";
	my %by;
	for (1 .. $n) {
		my $r = keepalive_get($s, $path);
		my ($p) = $r =~ /^X-Port: (\d+)/mi;
		$by{$p // 'none'}++;
	}
	return \%by;
}

sub shares {
	my ($by, $n) = @_;
	return join ' ', map { sprintf '%d:%.0f%%', $_, 100 * ($by->{$_} // 0) / $n } @ports;
}

sub all_above {
	my ($by, $n, $share) = @_;
	return !grep { ($by->{$_} // 0) < $share * $n } @ports;
}

ok(poll_until(sub { peer()->{idle} == 8 }, 5), 'keepalive_min 8: eight idle connections opened');

my $min = spread('/spread/x', 400);
ok(all_above($min, 400, 0.15), 'keepalive_min 8: every backend above 15% of 400 requests')
	or diag(shares($min, 400));
note('with keepalive_min 8: ' . shares($min, 400));

my $plain = spread('/plain/x', 400);
note('without keepalive_min: ' . shares($plain, 400));
is(($plain->{none} // 0) + ($plain->{$ports[0]} // 0) + ($plain->{$ports[1]} // 0)
	+ ($plain->{$ports[2]} // 0) + ($plain->{$ports[3]} // 0), 400, 'without: all answered');

my $p = peer();
is($p->{open}, 8, 'api: open');
ok($p->{max} >= $p->{avg} && $p->{avg} >= 0, 'api: age max and average')
	or diag("max $p->{max} avg $p->{avg}");

# keepalive_time 2s: connections are recycled and replaced.
ok(poll_until(sub { peer()->{recycled} >= 8 }, 5), 'keepalive_time: connections recycled');
ok(poll_until(sub { peer()->{open} == 8 }, 3), 'and replaced');
ok(peer()->{max} < 2500, 'no connection older than keepalive_time') or diag(peer()->{max});

# Rolling restart: two backends stop; their connections close and are
# replaced on the other two; they come back.
$t->stop_backend($ports[0]);
$t->stop_backend($ports[1]);
my $during = spread('/spread/x', 100);
is(($during->{$ports[2]} // 0) + ($during->{$ports[3]} // 0), 100,
	'two backends down: all requests answered by the others') or diag(shares($during, 100));
$t->backend($ports[0]);
$t->backend($ports[1]);
my $back = time();
my $last;
my $spread_again = poll_until(sub {
	$last = spread('/spread/x', 100);
	all_above($last, 100, 0.15);
}, 5);
ok($spread_again, 'rolling restart: every backend back above 15% within 5 s') or diag(shares($last, 100));
note(sprintf 'spread again after %.1f s: %s', time() - $back, shares($last, 100));

# A reload keeps serving with the new generation's keeper.
ok($t->reload(), 'reload');
ok(poll_until(sub { peer()->{open} == 8 }, 5), 'new generation: eight open again');

# A bad value on reload is refused with file:line; the generation serving
# keeps its connections.
my $conf = $t->read_file('sluice.conf');
(my $bad = $conf) =~ s/keepalive_min 8;/keepalive_min eight;/ or die;
my @lines = split /\n/, $bad;
my ($line) = grep { $lines[$_ - 1] =~ /keepalive_min eight/ } 1 .. @lines;
$t->expect_errors(qr/\[emerg\] .*invalid value "eight" in "keepalive_min" directive/);
$t->write_file('sluice.conf', $bad);
ok(!$t->reload(), 'bad keepalive_min: reload refused');
ok($t->waitforlog(qr/\[emerg\] \d+#0: invalid value "eight" in "keepalive_min" directive in \S+sluice\.conf:$line/),
	'refused with file:line');
$t->write_file('sluice.conf', $conf);
is(peer()->{open}, 8, 'the running generation keeps its connections');
