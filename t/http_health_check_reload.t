#!/usr/bin/perl

# Active health checks across a reload: with "mandatory persistent" a peer
# healthy before the reload stays up at once, with "mandatory" alone it is
# "checking" again until its first check passes; a peer the reload adds
# starts in "checking" and gets no traffic until it passes (here never).
# The checks answer after 1.5 s, so the window after the reload is wide.

use warnings;
use strict;

use Test::More;
use IO::Socket::INET;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;

my $t = Test::Sluice->new()->has(qw/http upstream_zone/)->plan(7);

my $conf = <<'EOF';

%%TEST_GLOBALS%%

events {
}

http {
    access_log off;

    upstream p {
        zone z 64k;
        server 127.0.0.1:%%PORT_8081%% max_fails=0;
        %%EXTRA%%
    }

    upstream n {
        zone z2 64k;
        server 127.0.0.1:%%PORT_8082%% max_fails=0;
    }

    server {
        listen 127.0.0.1:%%PORT_8080%%;
        location /p/ {
            proxy_pass http://p;
            health_check interval=500ms uri=/health mandatory persistent;
        }
        location /n/ {
            proxy_pass http://n;
            health_check interval=500ms uri=/health mandatory;
        }
        location /api/ { api; }
    }
}

EOF

(my $c1 = $conf) =~ s/%%EXTRA%%//;
(my $c2 = $conf) =~ s/%%EXTRA%%/server 127.0.0.1:%%PORT_8083%% max_fails=0;/;
$t->write_file_expand('sluice.conf', $c1);

my $d = $t->testdir();

# One process per connection: /health answers after 1.5 s (500 on 8083),
# anything else at once with X-Port.
sub backend {
	my ($port) = @_;
	my $l = IO::Socket::INET->new(LocalAddr => "127.0.0.1:$port",
		Listen => 128, ReuseAddr => 1, Proto => 'tcp') or die "$port: $!";
	open my $r, '>', "$d/ready_$port"; close $r;
	local $SIG{CHLD} = 'IGNORE';
	local $SIG{TERM} = sub { exit 0 };
	while (1) {
		my $c = $l->accept() or next;
		my $pid = fork() // next;
		if ($pid) { close $c; next; }
		local $SIG{TERM} = 'DEFAULT';
		my $head = '';
		while ($head !~ /\r\n\r\n/) {
			my $n = sysread($c, my $b, 4096) or last;
			$head .= $b;
		}
		my ($uri) = $head =~ /^\S+ (\S+)/;
		my $status = 200;
		if (($uri // '') eq '/health') {
			select(undef, undef, undef, 1.5);
			$status = 500 if $port == main::port(8083);
		}
		print $c "HTTP/1.1 $status X\r\nX-Port: $port\r\nContent-Length: 2\r\n"
			. "Connection: close\r\n\r\nok";
		close $c;
		POSIX::_exit(0);
	}
}

port(8083);
Test::Sluice::_release_ports();
for my $p (8081, 8082, 8083) {
	$t->run_daemon(\&backend, port($p));
	$t->waitforfile("$d/ready_" . port($p)) or die "backend $p";
}
$t->run();

my ($p1, $p2, $p3) = map { port($_) } (8081, 8082, 8083);

ok(poll_until(sub { state('p', $p1) eq 'up' && state('n', $p2) eq 'up' }, 6),
	'both peers up once checked');

$t->write_file_expand('sluice.conf', $c2);
ok($t->reload(), 'reloaded');

# Until the old workers stop, a new connection may still reach one (which
# shows the old zone): look for the new generation's answer, within the
# 1.5 s its first checks take.
is(state('p', $p1), 'up', 'mandatory persistent: healthy peer stays up');
ok(poll_until(sub { state('n', $p2) eq 'checking' }, 1.2),
	'mandatory alone: checking again after reload');
ok(poll_until(sub { state('p', $p3) eq 'checking' }, 1.2), 'added peer starts in checking');
my %c;
for (1 .. 6) {
	my ($p) = http_get('/p/x') =~ /^X-Port: (\d+)/mi;
	$c{$p // 'none'}++;
}
is($c{$p1}, 6, 'traffic only to the persistent peer');
ok(poll_until(sub { state('n', $p2) eq 'up' && state('p', $p3) eq 'unhealthy' }, 6),
	'checked after the reload');

sub state {
	my ($u, $p) = @_;
	my $r = http_get("/api/9/http/upstreams/$u");
	my ($body) = $r =~ /\r\n\r\n(.*)$/s;
	require JSON::PP;
	my $j = eval { JSON::PP->new->decode($body // '') } or return '';
	for my $peer (@{$j->{peers}}) {
		return $peer->{state} if $peer->{server} eq "127.0.0.1:$p";
	}
	return '';
}
